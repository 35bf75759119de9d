// CRC-32C (Castagnoli, polynomial 0x1EDC6F41 reflected as 0x82F63B78), the checksum of iSCSI,
// ext4 metadata and LevelDB/RocksDB blocks. Checkpoint files carry it so a torn or bit-flipped
// file is found on load. On x86-64 with SSE4.2 it uses the crc32 instruction (several GB/s);
// elsewhere a table-driven version (slicing by 8) that gives the same values.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace bw {

// Extends `crc` (the value returned for the bytes before; 0 to start) over `n` bytes.
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);
inline uint32_t crc32c(const void* data, size_t n) { return crc32c_extend(0, data, n); }

// CRC of the concatenation A || B from crc(A), crc(B) and the length of B (zlib's
// crc32_combine for this polynomial), so a file's CRC follows from its parts' without a second
// pass over the data.
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b);

// The portable table-driven version, always; for tests that compare it with the fast one.
uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n);

// "e3069283": 8 lowercase hex digits, as sidecars store it.
std::string crc32c_hex(uint32_t crc);

}  // namespace bw
