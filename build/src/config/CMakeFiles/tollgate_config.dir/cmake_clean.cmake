file(REMOVE_RECURSE
  "CMakeFiles/tollgate_config.dir/rules_file.cc.o"
  "CMakeFiles/tollgate_config.dir/rules_file.cc.o.d"
  "libtollgate_config.a"
  "libtollgate_config.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/tollgate_config.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
