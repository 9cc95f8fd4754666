file(REMOVE_RECURSE
  "CMakeFiles/tollgate-debt-demo.dir/debt_demo.cc.o"
  "CMakeFiles/tollgate-debt-demo.dir/debt_demo.cc.o.d"
  "tollgate-debt-demo"
  "tollgate-debt-demo.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/tollgate-debt-demo.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
