#----------------------------------------------------------------
# Generated CMake target import file for configuration "RelWithDebInfo".
#----------------------------------------------------------------

# Commands may need to know the format version.
set(CMAKE_IMPORT_FILE_VERSION 1)

# Import target "tollgate::core" for configuration "RelWithDebInfo"
set_property(TARGET tollgate::core APPEND PROPERTY IMPORTED_CONFIGURATIONS RELWITHDEBINFO)
set_target_properties(tollgate::core PROPERTIES
  IMPORTED_LINK_INTERFACE_LANGUAGES_RELWITHDEBINFO "CXX"
  IMPORTED_LOCATION_RELWITHDEBINFO "${_IMPORT_PREFIX}/lib/libtollgate_core.a"
  )

list(APPEND _cmake_import_check_targets tollgate::core )
list(APPEND _cmake_import_check_files_for_tollgate::core "${_IMPORT_PREFIX}/lib/libtollgate_core.a" )

# Import target "tollgate::config" for configuration "RelWithDebInfo"
set_property(TARGET tollgate::config APPEND PROPERTY IMPORTED_CONFIGURATIONS RELWITHDEBINFO)
set_target_properties(tollgate::config PROPERTIES
  IMPORTED_LINK_INTERFACE_LANGUAGES_RELWITHDEBINFO "CXX"
  IMPORTED_LOCATION_RELWITHDEBINFO "${_IMPORT_PREFIX}/lib/libtollgate_config.a"
  )

list(APPEND _cmake_import_check_targets tollgate::config )
list(APPEND _cmake_import_check_files_for_tollgate::config "${_IMPORT_PREFIX}/lib/libtollgate_config.a" )

# Commands beyond this point should not need to know the version.
set(CMAKE_IMPORT_FILE_VERSION)
