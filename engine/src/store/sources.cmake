# store/: the run history in SQLite. Included from engine/CMakeLists.txt; paths relative to engine/.
find_package(SQLite3 REQUIRED)
# Global, so that test suites which write older schemas by hand can link SQLite too.
set_target_properties(SQLite::SQLite3 PROPERTIES IMPORTED_GLOBAL TRUE)
find_package(Threads REQUIRED)
target_link_libraries(stagecraft_engine PRIVATE SQLite::SQLite3 Threads::Threads)
target_sources(stagecraft_engine PRIVATE
  src/store/sqlite_db.cpp
  src/store/schema.cpp
  src/store/process_identity.cpp
  src/store/run_store.cpp
  src/store/run_recorder.cpp
)
