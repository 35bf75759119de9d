# LibTorch for the torch layers (model, data, runtime, elastic) and `breakwater-torch`.
#
# Where it comes from, first match wins (docs/build.md):
#   -DTorch_DIR=<root>/share/cmake/Torch   a libtorch archive or another installation
#   -DBW_PYTHON=<python>                   a Python whose `torch` package is used
#   default                                ${PROJECT_SOURCE_DIR}/.venv/bin/python, the virtual
#                                          environment that scripts/setup.sh makes (torch==2.11.0)
#
# Two variants from one tree:
#   default (CPU)   links libtorch_cpu and libc10 only: a CPU worker never loads libtorch_cuda
#                   and the CUDA libraries behind it (cuDNN, cuBLAS, NCCL, ...). It needs no CUDA
#                   toolkit, so TorchConfig.cmake (which looks for one whenever LibTorch was built
#                   with CUDA) is not used.
#   -DBW_CUDA=ON    find_package(Torch) as PyTorch documents it: libtorch (CPU and CUDA), c10_cuda,
#                   and the CUDA toolkit; defines BW_CUDA=1.
# Both provide the target bw::torch.
#
# fmt: LibTorch's headers (c10d, c10/util) include <fmt/...> and the wheel ships the fmt they
# are written against (12.x) in its include root, which shadows Debian's fmt (9.x) for every file
# that sees that root. So a build with LibTorch uses that one fmt everywhere, header-only, and
# links no libfmt (bw::fmt); a pure build (-DBW_WITH_TORCH=OFF) uses Debian's.

option(BW_CUDA "Build the CUDA-capable variant (libtorch_cuda, c10_cuda, NCCL)" OFF)
# BW_PYTHON is defined in the top-level CMakeLists.txt.

if(Torch_DIR)
  get_filename_component(BW_TORCH_ROOT "${Torch_DIR}/../../.." ABSOLUTE)
else()
  if(NOT EXISTS "${BW_PYTHON}")
    message(FATAL_ERROR
      "LibTorch not found: ${BW_PYTHON} does not exist. Run scripts/setup.sh (it makes .venv with "
      "torch==2.11.0), or pass -DBW_PYTHON=<a python with torch> or -DTorch_DIR=<libtorch>/share/cmake/Torch")
  endif()
  execute_process(
    COMMAND "${BW_PYTHON}" -c "import torch.utils, sys; sys.stdout.write(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE BW_TORCH_CMAKE_PREFIX RESULT_VARIABLE BW_TORCH_RC ERROR_VARIABLE BW_TORCH_ERR)
  if(NOT BW_TORCH_RC EQUAL 0)
    message(FATAL_ERROR "LibTorch not found: ${BW_PYTHON} cannot import torch (${BW_TORCH_ERR}). "
                        "Run scripts/setup.sh, or pass -DBW_PYTHON / -DTorch_DIR")
  endif()
  get_filename_component(BW_TORCH_ROOT "${BW_TORCH_CMAKE_PREFIX}/../.." ABSOLUTE)
  set(Torch_DIR "${BW_TORCH_CMAKE_PREFIX}/Torch" CACHE PATH "LibTorch's CMake package folder" FORCE)
endif()

file(STRINGS "${BW_TORCH_ROOT}/share/cmake/Torch/TorchConfigVersion.cmake" BW_TORCH_VERSION_LINE
     REGEX "set\\(PACKAGE_VERSION \"")
string(REGEX REPLACE ".*\"([^\"]+)\".*" "\\1" BW_TORCH_VERSION "${BW_TORCH_VERSION_LINE}")
if(BW_TORCH_VERSION VERSION_LESS 2.4)
  message(FATAL_ERROR "LibTorch ${BW_TORCH_VERSION} at ${BW_TORCH_ROOT} is too old: breakwater "
                      "needs 2.4 or newer (it is tested on 2.11.0)")
endif()
message(STATUS "LibTorch ${BW_TORCH_VERSION}: ${BW_TORCH_ROOT} ")

add_library(bw_torch INTERFACE)
add_library(bw::torch ALIAS bw_torch)
if(BW_CUDA)
  # breakwater compiles no CUDA code of its own; naming the architecture (Hopper: H100, H200)
  # keeps TorchConfig from probing for a GPU at configure time, so this variant also configures
  # and links on a machine with the toolkit and no GPU (CI).
  if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST} AND NOT TORCH_CUDA_ARCH_LIST)
    set(TORCH_CUDA_ARCH_LIST "9.0")
  endif()
  # TorchConfig looks for libtorch, libc10, libc10_cuda and kineto with find_library(... PATHS <root>/lib),
  # which searches the system's library folders FIRST: on a machine that also has another
  # LibTorch there (Debian's libtorch-dev puts 1.13 in /usr/lib), it would link that one's
  # libtorch.so beside this one's headers. Found here in this LibTorch only, the cached results
  # are what TorchConfig then uses.
  foreach(lib torch c10 c10_cuda kineto)
    set(var ${lib}_LIBRARY)
    if(lib STREQUAL "torch")
      set(var TORCH_LIBRARY)
    elseif(lib STREQUAL "c10_cuda")
      set(var C10_CUDA_LIBRARY)
    endif()
    find_library(${var} ${lib} PATHS "${BW_TORCH_ROOT}/lib" NO_DEFAULT_PATH)
    if(NOT ${var} AND NOT lib STREQUAL "kineto")
      message(FATAL_ERROR "-DBW_CUDA=ON: ${BW_TORCH_ROOT}/lib has no lib${lib}.so; this LibTorch "
                          "is not a CUDA build (pass -DBW_PYTHON or -DTorch_DIR of one)")
    endif()
  endforeach()
  # Likewise TorchConfig's find_package(Caffe2 PATHS ...), which would find another LibTorch's
  # Caffe2Config (its libtorch_cpu) first.
  set(Caffe2_DIR "${BW_TORCH_ROOT}/share/cmake/Caffe2" CACHE PATH "LibTorch's Caffe2 package" FORCE)
  find_package(Torch REQUIRED PATHS "${BW_TORCH_ROOT}/share/cmake/Torch" NO_DEFAULT_PATH)
  foreach(lib IN LISTS TORCH_LIBRARIES)
    string(FIND "${lib}" "${BW_TORCH_ROOT}/" at)
    get_filename_component(name "${lib}" NAME)
    if(IS_ABSOLUTE "${lib}" AND NOT at EQUAL 0 AND name MATCHES "^lib(torch|c10)")
      message(FATAL_ERROR "LibTorch at ${BW_TORCH_ROOT} resolved ${lib} from another LibTorch")
    endif()
  endforeach()
  target_link_libraries(bw_torch INTERFACE ${TORCH_LIBRARIES})
  target_compile_definitions(bw_torch INTERFACE BW_CUDA=1)
else()
  foreach(lib torch_cpu c10)
    find_library(BW_LIB_${lib} ${lib} PATHS "${BW_TORCH_ROOT}/lib" NO_DEFAULT_PATH REQUIRED)
    target_link_libraries(bw_torch INTERFACE "${BW_LIB_${lib}}")
  endforeach()
  target_include_directories(bw_torch SYSTEM INTERFACE
      "${BW_TORCH_ROOT}/include" "${BW_TORCH_ROOT}/include/torch/csrc/api/include")
  target_compile_definitions(bw_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=1)
  # The definitions LibTorch declares for libtorch_cpu's users (Caffe2Targets.cmake; for PyTorch's
  # wheel USE_DISTRIBUTED, USE_C10D_GLOO, USE_RPC, USE_TENSORPIPE). Its headers lay out some
  # classes by them, so they must match the library. They are also what -DBW_CUDA=ON gets through
  # find_package(Torch), so that every file whose preprocessed text does not differ between the
  # variants compiles to the same object, and ccache serves it to the other variant.
  set(BW_CAFFE2_TARGETS "${BW_TORCH_ROOT}/share/cmake/Caffe2/Caffe2Targets.cmake")
  if(EXISTS "${BW_CAFFE2_TARGETS}")
    file(READ "${BW_CAFFE2_TARGETS}" BW_CAFFE2_TEXT)
    string(REGEX MATCH "add_library\\(torch_cpu SHARED IMPORTED\\)[^)]*INTERFACE_COMPILE_DEFINITIONS \"([^\"]*)\""
           BW_TORCH_CPU_DEFS_MATCH "${BW_CAFFE2_TEXT}")
    if(BW_TORCH_CPU_DEFS_MATCH)
      target_compile_definitions(bw_torch INTERFACE ${CMAKE_MATCH_1})
      message(STATUS "libtorch_cpu's compile definitions: ${CMAKE_MATCH_1}")
    endif()
  endif()
endif()

# LibTorch's fmt, and only it, for every target (see above).
set(BW_FMT_INCLUDE "${PROJECT_BINARY_DIR}/fmt-include")
file(MAKE_DIRECTORY "${BW_FMT_INCLUDE}")
file(CREATE_LINK "${BW_TORCH_ROOT}/include/fmt" "${BW_FMT_INCLUDE}/fmt" SYMBOLIC)
add_library(bw_fmt INTERFACE)
target_include_directories(bw_fmt SYSTEM INTERFACE "${BW_FMT_INCLUDE}")
target_compile_definitions(bw_fmt INTERFACE FMT_HEADER_ONLY=1)
