# Run by proto/CMakeLists.txt after protoc (cmake -DHEADER=<x.grpc.pb.h> -DREQUESTS=<a,b> -P this): makes the
# generated service header declare the lenient deserialization of its request types (proto/lenient_parse.h,
# Note [Requests that do not parse]) right after it includes the messages, before anything can use the
# default one.
file(READ "${HEADER}" text)
string(FIND "${text}" "autouvm/lenient" already)
if(already GREATER -1)
  return()
endif()
string(REGEX MATCH "#include \"[^\"]*\\.pb\\.h\"\n" messages "${text}")
if(NOT messages)
  message(FATAL_ERROR "${HEADER}: no #include of the messages' header to follow")
endif()
set(decl "${messages}// autouvm/lenient: proto/lenient_requests.cmake\n#include \"proto/lenient_parse.h\"\n")
string(REPLACE "," ";" requests "${REQUESTS}")
foreach(r ${requests})
  string(APPEND decl "AUTOUVM_LENIENT_REQUEST(${r});\n")
endforeach()
string(REPLACE "${messages}" "${decl}" text "${text}")
file(WRITE "${HEADER}" "${text}")
