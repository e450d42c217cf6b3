"""Generated protobuf and gRPC stubs (tools/gen_python_stubs.sh). Do not edit."""
