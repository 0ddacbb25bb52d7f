# comm/: the Communicator interface, Gloo (CPU) implementation, rendezvous store.
# Included from engine/CMakeLists.txt; paths relative to engine/.
find_package(Gloo CONFIG REQUIRED)
find_package(Threads REQUIRED)
target_link_libraries(stagecraft_engine PRIVATE gloo Threads::Threads)
target_sources(stagecraft_engine PRIVATE
  src/comm/socket.cpp
  src/comm/store_server.cpp
  src/comm/store_client.cpp
  src/comm/communicator.cpp
  src/comm/gloo_store.cpp
  src/comm/gloo_communicator.cpp
)
