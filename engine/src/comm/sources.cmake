# comm/: the Communicator interface, Gloo (CPU) implementation, rendezvous store.
# Included from engine/CMakeLists.txt; paths relative to engine/.
find_package(Gloo CONFIG REQUIRED)
find_package(Threads REQUIRED)
target_link_libraries(stagecraft_engine PRIVATE gloo Threads::Threads)
