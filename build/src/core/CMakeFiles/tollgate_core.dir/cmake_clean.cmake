file(REMOVE_RECURSE
  "CMakeFiles/tollgate_core.dir/key_table.cc.o"
  "CMakeFiles/tollgate_core.dir/key_table.cc.o.d"
  "CMakeFiles/tollgate_core.dir/ledger.cc.o"
  "CMakeFiles/tollgate_core.dir/ledger.cc.o.d"
  "CMakeFiles/tollgate_core.dir/limit.cc.o"
  "CMakeFiles/tollgate_core.dir/limit.cc.o.d"
  "CMakeFiles/tollgate_core.dir/rules.cc.o"
  "CMakeFiles/tollgate_core.dir/rules.cc.o.d"
  "CMakeFiles/tollgate_core.dir/token_bucket.cc.o"
  "CMakeFiles/tollgate_core.dir/token_bucket.cc.o.d"
  "libtollgate_core.a"
  "libtollgate_core.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/tollgate_core.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
