// See ../../README.md: held by pointer only.
#pragma once

namespace gloo::transport {
class Device;
class UnboundBuffer;
}  // namespace gloo::transport
