# runtime/: tensors, the CPU backend (OpenBLAS), layers forward/backward, optimizer.
# Included from engine/CMakeLists.txt; paths relative to engine/.
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
find_package(Threads REQUIRED)
target_link_libraries(stagecraft_engine PRIVATE PkgConfig::OPENBLAS Threads::Threads)
