// File: daemon/profiles/profile_store.h
//
// Capacity and named workload profiles as the seed keeps them (research/seed-ddo.md §5): one
// pretty-printed JSON file per profile key, `ddo-capacity-v1-<24 hex>.json`, in a directory
// (DDO_PROFILE_DIR, else ~/.ddo/profiles). ddod stores and serves the files; what a record
// means (contexts, keys, limits, recommendations) is the client's, which computes the key
// from the record's context. A file that is not valid JSON is skipped with a warning when
// listed, and reported as corrupt when asked for; it is never served as a profile.
//
// Thread-safety: all methods may be called concurrently (writes are atomic renames).
#ifndef DDO_DAEMON_PROFILES_PROFILE_STORE_H_
#define DDO_DAEMON_PROFILES_PROFILE_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ddo {

struct ProfileFile {
  std::string key;   // the 24 hex digits of the file name
  std::string name;  // the record's context "name" (named workload profiles), else ""
  std::string json;  // the file's text, exactly as stored
  int64_t modified_unix_ms = 0;
};

// The directory: `requested` when given, else DDO_PROFILE_DIR of `environment`, else
// ~/.ddo/profiles; a leading "~" is the home directory `home`.
std::string ResolveProfileDir(const std::string& requested, const std::string& environment_dir,
                              const std::string& home);

// InvalidArgument unless `key` is 24 lowercase hex digits.
absl::Status CheckProfileKey(const std::string& key);

// Every valid profile in `dir`, by key; an absent directory holds none.
absl::StatusOr<std::vector<ProfileFile>> ListProfiles(const std::string& dir);
// NotFound when there is none; DataLoss when the file is not a JSON object.
absl::StatusOr<ProfileFile> ReadProfile(const std::string& dir, const std::string& key);
// Writes `json` (a JSON object whose "profile_key" is `key`; InvalidArgument otherwise) to a
// temporary file and renames it into place; creates `dir` (0700) when missing.
absl::StatusOr<ProfileFile> WriteProfile(const std::string& dir, const std::string& key,
                                         const std::string& json);
// False when there was none.
absl::StatusOr<bool> DeleteProfile(const std::string& dir, const std::string& key);

}  // namespace ddo

#endif  // DDO_DAEMON_PROFILES_PROFILE_STORE_H_
