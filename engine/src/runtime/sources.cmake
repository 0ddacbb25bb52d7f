# runtime/: tensors, the CPU backend (OpenBLAS), layers forward/backward, optimizer.
# Included from engine/CMakeLists.txt; paths relative to engine/.
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
find_package(Threads REQUIRED)
target_link_libraries(stagecraft_engine PRIVATE PkgConfig::OPENBLAS Threads::Threads)
# CPU backend: our own thread pool (src/runtime/cpu/thread_pool.h says why not OpenMP); OpenBLAS
# runs single-threaded inside its pieces. -fopenmp-simd honours `omp simd` pragmas only: no runtime.
target_sources(stagecraft_engine PRIVATE
  src/runtime/cpu/cpu_device.cpp
  src/runtime/cpu/thread_pool.cpp
  src/runtime/cpu/matmul.cpp
  src/runtime/cpu/attention.cpp
  src/runtime/cpu/pointwise.cpp
  src/runtime/rng.cpp)
# The kernels never read floating-point exception flags or errno: without -fno-math-errno and
# -fno-trapping-math GCC keeps a branch per clamp and per sqrt and vectorises none of the exp/sqrt
# loops.
set_source_files_properties(
  src/runtime/cpu/attention.cpp src/runtime/cpu/pointwise.cpp src/runtime/cpu/matmul.cpp
  PROPERTIES COMPILE_OPTIONS
  "$<$<CXX_COMPILER_ID:GNU,Clang>:-fopenmp-simd;-fno-math-errno;-fno-trapping-math>")
