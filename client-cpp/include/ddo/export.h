// File: client-cpp/include/ddo/export.h
//
// DDO_CLIENT_API marks what libddo_client_rpc.so exports; the library is built with
// -fvisibility=hidden, so gRPC, protobuf, absl and ddo_wire stay private inside it.
//
// Thread-safety: nothing to say: a macro, no code.
#ifndef DDO_CLIENT_EXPORT_H_
#define DDO_CLIENT_EXPORT_H_

#define DDO_CLIENT_API __attribute__((visibility("default")))

#endif  // DDO_CLIENT_EXPORT_H_
