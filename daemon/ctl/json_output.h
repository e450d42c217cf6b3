// File: daemon/ctl/json_output.h
//
// `ddoctl --json`: a daemon answer as JSON that scripts can use as it is. Unlike protobuf's own
// JSON mapping, 64-bit integers are numbers (not strings) and enum values are their short
// names in lower case (`cuda` for BACKEND_CUDA, `ready` for COMPONENT_STATE_READY). Field
// names are the proto's; every scalar and list is present, defaults included; an unset
// message field or oneof member is left out; maps are objects; bytes are base64.
//
// Thread-safety: pure functions; callable from any thread.
#ifndef DDO_DAEMON_CTL_JSON_OUTPUT_H_
#define DDO_DAEMON_CTL_JSON_OUTPUT_H_

#include <string>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "nlohmann/json.hpp"

namespace ddo {

nlohmann::json MessageToPlainJson(const google::protobuf::Message& message);

// The short name of an enum value, in lower case: its name without its type's prefix (the
// zero value's name less UNSPECIFIED, else UPPER_SNAKE of the type's name plus '_'); the whole
// name when it has no such prefix.
std::string ShortEnumName(const google::protobuf::EnumValueDescriptor& value);

}  // namespace ddo

#endif  // DDO_DAEMON_CTL_JSON_OUTPUT_H_
