// File: daemon/profiles/profile_store.cc
#include "daemon/profiles/profile_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "nlohmann/json.hpp"

namespace ddo {
namespace {

namespace fs = std::filesystem;

constexpr char kPrefix[] = "ddo-capacity-v1-";
constexpr char kSuffix[] = ".json";
constexpr size_t kKeyLength = 24;

std::string FileName(const std::string& key) { return absl::StrCat(kPrefix, key, kSuffix); }

int64_t ModifiedMs(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return 0;
  return static_cast<int64_t>(info.st_mtim.tv_sec) * 1000 + info.st_mtim.tv_nsec / 1000000;
}

// The record's context name, or "" (capacity profiles have no name).
std::string ContextName(const nlohmann::json& record) {
  auto context = record.find("context");
  if (context == record.end() || !context->is_object()) return "";
  auto name = context->find("name");
  return name != context->end() && name->is_string() ? name->get<std::string>() : "";
}

absl::StatusOr<ProfileFile> Load(const std::string& dir, const std::string& key) {
  const std::string path = (fs::path(dir) / FileName(key)).string();
  std::error_code error;
  if (!fs::exists(path, error)) return absl::NotFoundError(absl::StrCat("no profile ", key, " in ", dir));
  std::ifstream in(path);
  if (!in) {
    return absl::PermissionDeniedError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  ProfileFile file{key, "", text.str(), ModifiedMs(path)};
  nlohmann::json record = nlohmann::json::parse(file.json, nullptr, /*allow_exceptions=*/false);
  if (record.is_discarded() || !record.is_object()) {
    return absl::DataLossError(absl::StrCat(path, " is not a JSON object: ignored"));
  }
  file.name = ContextName(record);
  return file;
}

}  // namespace

std::string ResolveProfileDir(const std::string& requested, const std::string& environment_dir,
                              const std::string& home) {
  std::string dir = !requested.empty()          ? requested
                    : !environment_dir.empty()  ? environment_dir
                                                : "~/.ddo/profiles";
  if (dir == "~" || absl::StartsWith(dir, "~/")) dir = home + dir.substr(1);
  return dir;
}

absl::Status CheckProfileKey(const std::string& key) {
  bool hex = key.size() == kKeyLength;
  for (char c : key) hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  if (!hex) {
    return absl::InvalidArgumentError(absl::StrCat(
        "profile key '", key, "' must be 24 lowercase hex digits (the file ", kPrefix,
        "<key>", kSuffix, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ProfileFile>> ListProfiles(const std::string& dir) {
  std::vector<ProfileFile> files;
  std::error_code error;
  if (!fs::exists(dir, error)) return files;
  std::vector<std::string> keys;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (!absl::StartsWith(name, kPrefix) || !absl::EndsWith(name, kSuffix)) continue;
    const std::string key = name.substr(sizeof(kPrefix) - 1, name.size() - (sizeof(kPrefix) - 1) -
                                                                 (sizeof(kSuffix) - 1));
    if (CheckProfileKey(key).ok()) keys.push_back(key);
  }
  if (error) {
    return absl::PermissionDeniedError(absl::StrCat("cannot list ", dir, ": ", error.message()));
  }
  std::sort(keys.begin(), keys.end());
  for (const std::string& key : keys) {
    absl::StatusOr<ProfileFile> file = Load(dir, key);
    if (!file.ok()) {
      Logger("profiles")->warn("{}", file.status().message());
      continue;
    }
    files.push_back(*std::move(file));
  }
  return files;
}

absl::StatusOr<ProfileFile> ReadProfile(const std::string& dir, const std::string& key) {
  if (absl::Status valid = CheckProfileKey(key); !valid.ok()) return valid;
  return Load(dir, key);
}

absl::StatusOr<ProfileFile> WriteProfile(const std::string& dir, const std::string& key,
                                         const std::string& json) {
  if (absl::Status valid = CheckProfileKey(key); !valid.ok()) return valid;
  nlohmann::json record = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (record.is_discarded() || !record.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("profile ", key, ": the text is not a JSON object"));
  }
  auto stored_key = record.find("profile_key");
  if (stored_key == record.end() || !stored_key->is_string() || *stored_key != key) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile ", key, ": its \"profile_key\" must be \"", key, "\""));
  }
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create ", dir, ": ", error.message()));
  }
  (void)::chmod(dir.c_str(), 0700);
  const fs::path target = fs::path(dir) / FileName(key);
  const fs::path temporary =
      fs::path(dir) / absl::StrCat(".", FileName(key), ".", ::getpid(), ".tmp");
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << json;
    if (json.empty() || json.back() != '\n') out << '\n';
    out.flush();
    if (!out) {
      fs::remove(temporary, error);
      return absl::ResourceExhaustedError(absl::StrCat("cannot write ", temporary.string()));
    }
  }
  fs::rename(temporary, target, error);
  if (error) {
    fs::remove(temporary, error);
    return absl::PermissionDeniedError(absl::StrCat("cannot replace ", target.string(), ": ",
                                                    error.message()));
  }
  return Load(dir, key);
}

absl::StatusOr<bool> DeleteProfile(const std::string& dir, const std::string& key) {
  if (absl::Status valid = CheckProfileKey(key); !valid.ok()) return valid;
  std::error_code error;
  const bool removed = fs::remove(fs::path(dir) / FileName(key), error);
  if (error) {
    return absl::PermissionDeniedError(absl::StrCat("cannot remove profile ", key, ": ", error.message()));
  }
  return removed;
}

}  // namespace ddo
