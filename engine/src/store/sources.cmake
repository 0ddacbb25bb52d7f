# store/: the run history in SQLite. Included from engine/CMakeLists.txt; paths relative to engine/.
