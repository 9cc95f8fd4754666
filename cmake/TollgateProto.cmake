# tollgate_proto_library(TARGET PROTO): a static library of the C++ that protoc generates from
# proto/PROTO (e.g. tollgate/v1/api.proto), its headers on the target's include path as
# "tollgate/v1/api.pb.h".
#
# protoc runs by hand rather than through FindProtobuf's protobuf_generate(): in CMake 3.25
# (Debian 12) protobuf_generate() names its outputs after the .proto's path relative to
# CMAKE_CURRENT_SOURCE_DIR (../../proto/tollgate/v1/) while protoc writes them relative to the
# import directory (tollgate/v1/), so a .proto outside the calling directory never builds. With
# APPEND_PATH it builds, but registers the file as "api.proto" instead of
# "tollgate/v1/api.proto", which breaks any later proto that imports it.
#
# Generated code is not ours to keep warning-free: the library gets no tollgate_warnings, and its
# headers are SYSTEM includes so that including them from our -Werror code stays quiet too.
function(tollgate_proto_library target proto)
  find_package(Protobuf REQUIRED)
  set(root ${PROJECT_SOURCE_DIR}/proto)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/generated)
  string(REGEX REPLACE "\\.proto$" "" stem ${proto})
  set(sources ${out}/${stem}.pb.cc ${out}/${stem}.pb.h)
  file(MAKE_DIRECTORY ${out})
  add_custom_command(
    OUTPUT ${sources}
    COMMAND protobuf::protoc --cpp_out=${out} -I ${root} ${root}/${proto}
    DEPENDS ${root}/${proto} protobuf::protoc
    COMMENT "protoc: ${proto}"
    VERBATIM)
  add_library(${target} STATIC ${sources})
  target_include_directories(${target} SYSTEM PUBLIC $<BUILD_INTERFACE:${out}>)
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_link_libraries(${target} PUBLIC protobuf::libprotobuf)
endfunction()

# tollgate_grpc_library(TARGET PROTO): the same, plus the gRPC C++ service code
# (PROTO's .grpc.pb.cc/.h from grpc_cpp_plugin), linked with gRPC::grpc++.
function(tollgate_grpc_library target proto)
  find_package(Protobuf REQUIRED)
  # Once per directory: a second find_package(gRPC) there redefines c-ares's imported target.
  if(NOT TARGET gRPC::grpc++)
    find_package(gRPC CONFIG REQUIRED)
  endif()
  set(root ${PROJECT_SOURCE_DIR}/proto)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/generated)
  string(REGEX REPLACE "\\.proto$" "" stem ${proto})
  set(sources ${out}/${stem}.pb.cc ${out}/${stem}.pb.h ${out}/${stem}.grpc.pb.cc ${out}/${stem}.grpc.pb.h)
  file(MAKE_DIRECTORY ${out})
  add_custom_command(
    OUTPUT ${sources}
    COMMAND protobuf::protoc --cpp_out=${out} --grpc_out=${out}
            --plugin=protoc-gen-grpc=$<TARGET_FILE:gRPC::grpc_cpp_plugin> -I ${root} ${root}/${proto}
    DEPENDS ${root}/${proto} protobuf::protoc gRPC::grpc_cpp_plugin
    COMMENT "protoc + grpc_cpp_plugin: ${proto}"
    VERBATIM)
  add_library(${target} STATIC ${sources})
  target_include_directories(${target} SYSTEM PUBLIC $<BUILD_INTERFACE:${out}>)
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_link_libraries(${target} PUBLIC protobuf::libprotobuf gRPC::grpc++)
endfunction()
