// File: daemon/service/tensor_proto.h
//
// Tensor tables and element types between the protocol (ddo.v1.TensorSpec, ddo.v1.DType) and
// the store's plain types. A table from a request is converted, then validated by the store
// (ValidateTensorTable), so that every caller of the store sees the same rules.
//
// Thread-safety: pure functions.
#ifndef DDO_DAEMON_SERVICE_TENSOR_PROTO_H_
#define DDO_DAEMON_SERVICE_TENSOR_PROTO_H_

#include <vector>

#include "absl/status/statusor.h"
#include "daemon/layout/dtype.h"
#include "daemon/layout/tensor_table.h"
#include "ddo/v1/components.pb.h"
#include "google/protobuf/repeated_field.h"

namespace ddo {

// DTYPE_UNSPECIFIED and values this build does not know are InvalidArgument.
absl::StatusOr<DType> DTypeFromProto(ddo::v1::DType dtype);
ddo::v1::DType ToProto(DType dtype);

// InvalidArgument names the tensor: an unknown dtype, or anything ValidateTensorTable refuses.
absl::StatusOr<std::vector<TensorEntry>> TensorTableFromProto(
    const google::protobuf::RepeatedPtrField<ddo::v1::TensorSpec>& specs);

void ToProto(const TensorEntry& tensor, ddo::v1::TensorSpec* spec);

}  // namespace ddo

#endif  // DDO_DAEMON_SERVICE_TENSOR_PROTO_H_
