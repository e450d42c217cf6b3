// File: daemon/policy/module_blocks.h
//
// The repeated blocks of a model, from its module paths alone: "transformer_blocks.3" is a
// block when "transformer_blocks" has at least two numbered members. Blocks are the units
// of DDO_STREAM_UNIT=block and what the resident budget keeps whole.
//
// Thread-safety: pure functions.
#ifndef DDO_DAEMON_POLICY_MODULE_BLOCKS_H_
#define DDO_DAEMON_POLICY_MODULE_BLOCKS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ddo {

// The block of each module path: the outermost "<prefix>.<digits>" whose prefix has at least
// two distinct indices among the paths ("transformer_blocks.3", not
// "transformer_blocks.3.ff.net.2"); "" when none.
std::map<std::string, std::string> BlocksOf(const std::vector<std::string>& module_paths);

// The whole module the resident budget may keep for each module path ("" when none), by
// DDO_RESIDENT_MODULE_PATTERNS (StreamSettings::resident_module_patterns): the outermost
// prefix of the path that a pattern matches. "auto" adds the seed's inferred pattern
// ^<prefix>\.\d+$ of the repeated group with the most bytes (`bytes[i]`: the bytes of
// module_paths[i]; ties: more members). `described` gets the patterns in use. Paths longer
// than kMaxModulePathBytes get "" (never matched). InvalidArgument for a pattern that
// ParseStreamSettings would have refused.
absl::StatusOr<std::map<std::string, std::string>> ResidentCandidatesOf(
    const std::vector<std::string>& module_paths, const std::vector<uint64_t>& bytes,
    const std::vector<std::string>& patterns, std::string* described);

}  // namespace ddo

#endif  // DDO_DAEMON_POLICY_MODULE_BLOCKS_H_
