# launch/ remote: SSH nodes (libssh), hostfiles, preflight. Included from engine/CMakeLists.txt; paths relative to engine/.
