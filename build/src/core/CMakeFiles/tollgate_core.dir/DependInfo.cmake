
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/src/core/key_table.cc" "src/core/CMakeFiles/tollgate_core.dir/key_table.cc.o" "gcc" "src/core/CMakeFiles/tollgate_core.dir/key_table.cc.o.d"
  "/work/main/src/core/ledger.cc" "src/core/CMakeFiles/tollgate_core.dir/ledger.cc.o" "gcc" "src/core/CMakeFiles/tollgate_core.dir/ledger.cc.o.d"
  "/work/main/src/core/limit.cc" "src/core/CMakeFiles/tollgate_core.dir/limit.cc.o" "gcc" "src/core/CMakeFiles/tollgate_core.dir/limit.cc.o.d"
  "/work/main/src/core/rules.cc" "src/core/CMakeFiles/tollgate_core.dir/rules.cc.o" "gcc" "src/core/CMakeFiles/tollgate_core.dir/rules.cc.o.d"
  "/work/main/src/core/token_bucket.cc" "src/core/CMakeFiles/tollgate_core.dir/token_bucket.cc.o" "gcc" "src/core/CMakeFiles/tollgate_core.dir/token_bucket.cc.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
