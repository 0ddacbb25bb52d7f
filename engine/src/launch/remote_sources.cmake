# launch/ remote: SSH nodes (libssh), hostfiles, preflight. Included from engine/CMakeLists.txt; paths relative to engine/.
find_package(PkgConfig REQUIRED)
pkg_check_modules(SSH REQUIRED IMPORTED_TARGET libssh)
target_link_libraries(stagecraft_engine PRIVATE PkgConfig::SSH)
target_sources(stagecraft_engine PRIVATE
  src/launch/hostfile.cpp
  src/launch/ssh.cpp
  src/launch/remote_run.cpp
  src/launch/preflight.cpp
)
