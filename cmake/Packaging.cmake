# The Debian package: scripts/package builds build/ and runs
#   cpack --config build/CPackConfig.cmake   ->  tollgate_<version>_<arch>.deb
# (docs/operations.md, "Installing the .deb"). Included at the end of the top-level CMakeLists.txt.
#
# One runtime package, `tollgate`:
#   /usr/bin/            tollgated, tollgate, tollgate-load, tollgate-sim, tollgate-debt-demo
#                        (stripped), the programs `cmake --install` installs
#   /etc/tollgate/       tollgate.yaml and rules.yaml, both conffiles (packaging/conffiles)
#   /lib/systemd/system/ tollgated.service (config/tollgated.service, ExecStart=/usr/bin/tollgated)
# and packaging/postinst, prerm and postrm (the tollgate user, the cluster key, purge).
#
# The headers, static libraries and CMake package that `cmake --install` also installs (for
# find_package(tollgate)) are left out: hosts that run the daemon do not need them. A -dev
# package would be a second component with install rules of its own for them, export set included.

# CPack installs the package's files with this prefix, whatever CMAKE_INSTALL_PREFIX the tree
# was configured with: the programs go to /usr/bin, which the packaged unit's ExecStart names.
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(TOLLGATE_DEB_BINDIR ${CPACK_PACKAGING_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR})

# The unit as packaged: config/tollgated.service runs /usr/local/bin/tollgated (a
# `cmake --install --prefix /usr/local`, docs/operations.md section 1); the package's runs its own.
set(_tollgate_unit_source ${PROJECT_SOURCE_DIR}/config/tollgated.service)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_tollgate_unit_source})
file(READ ${_tollgate_unit_source} _tollgate_unit)
string(REPLACE "ExecStart=/usr/local/bin/tollgated " "ExecStart=${TOLLGATE_DEB_BINDIR}/tollgated "
  _tollgate_deb_unit "${_tollgate_unit}")
if(_tollgate_deb_unit STREQUAL _tollgate_unit)
  message(FATAL_ERROR "${_tollgate_unit_source}: no `ExecStart=/usr/local/bin/tollgated ` line to point at "
    "${TOLLGATE_DEB_BINDIR}/tollgated for the Debian package (cmake/Packaging.cmake)")
endif()
file(WRITE ${PROJECT_BINARY_DIR}/packaging/tollgated.service.new "${_tollgate_deb_unit}")
file(COPY_FILE ${PROJECT_BINARY_DIR}/packaging/tollgated.service.new ${PROJECT_BINARY_DIR}/packaging/tollgated.service
  ONLY_IF_DIFFERENT)

# Everything in the package is component `deb`, EXCLUDE_FROM_ALL: `cmake --install build
# --prefix PREFIX` never writes to /etc or /lib, and cpack installs this component alone.
set(TOLLGATE_DEB_PROGRAMS tollgated tollgate tollgate-load tollgate-sim tollgate-debt-demo)
install(TARGETS ${TOLLGATE_DEB_PROGRAMS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT deb EXCLUDE_FROM_ALL)
install(FILES ${PROJECT_BINARY_DIR}/packaging/tollgated.service
  DESTINATION /lib/systemd/system COMPONENT deb EXCLUDE_FROM_ALL)
install(FILES ${PROJECT_SOURCE_DIR}/config/tollgate.yaml ${PROJECT_SOURCE_DIR}/config/rules.yaml
  DESTINATION /etc/tollgate COMPONENT deb EXCLUDE_FROM_ALL)
# What cpack needs built: scripts/package builds this target, not the whole tree.
add_custom_target(tollgate-deb-programs)
add_dependencies(tollgate-deb-programs ${TOLLGATE_DEB_PROGRAMS})

# cpack runs the `preinstall` target first, which with Makefiles builds `all` (tests and
# benchmarks too) unless this is set. The ctest test package_deb runs cpack and must not rebuild
# binaries that other tests are running. It also drops the build that `make install` would do
# first; `cmake --install` never builds.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY TRUE)
# The build tree; a name; the component; where in the package.
set(CPACK_INSTALL_CMAKE_PROJECTS "${PROJECT_BINARY_DIR};tollgate;deb;/")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME tollgate)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "tollgate maintainers <maintainers@users.noreply.a-seed-8c1d8019.example>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "peer-to-peer cluster throttling daemon")
set(CPACK_PACKAGE_DESCRIPTION "tollgated enforces one token bucket per key across a cluster of service
hosts without a central store: each host's daemon decides locally and gossips
what it admitted. Also the tollgate CLI, the tollgate-load load generator and
the tollgate-sim cluster simulator.")
set(CPACK_STRIP_FILES ON)  # RelWithDebInfo binaries are mostly debug information
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # tollgate_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# The shared libraries the programs link (protobuf, gRPC, yaml-cpp, spdlog, OpenSSL, ...) come
# from dpkg-shlibdeps; adduser is for postinst. libnghttp2 serves Envoy's rate limit service to
# clients: dpkg-shlibdeps would accept deb12u1 (its newest symbol), and deb12u3 fixes an assertion
# a peer can trigger (CVE-2026-27135; docs/rls-h2-plan.md section 3).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser, libnghttp2-14 (>= 1.52.0-1+deb12u3)")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${PROJECT_SOURCE_DIR}/packaging/conffiles
  ${PROJECT_SOURCE_DIR}/packaging/postinst
  ${PROJECT_SOURCE_DIR}/packaging/prerm
  ${PROJECT_SOURCE_DIR}/packaging/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)  # scripts 0755, conffiles 0644
include(CPack)
