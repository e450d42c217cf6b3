// File: daemon/store/backing_files.cc
//
// BackingFiles::TakeFrom: one fstat per file, then the descriptors moved out of the set.
//
// Thread-safety: see the header.
#include "daemon/store/backing_files.h"

#include <sys/stat.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"

namespace ddo {
namespace {

FileIdentity IdentityOf(const struct stat& info) {
  FileIdentity identity;
  identity.device = static_cast<uint64_t>(info.st_dev);
  identity.inode = static_cast<uint64_t>(info.st_ino);
  identity.size = static_cast<uint64_t>(info.st_size);
  identity.modified_ns =
      static_cast<int64_t>(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec;
  identity.changed_ns =
      static_cast<int64_t>(info.st_ctim.tv_sec) * 1000000000 + info.st_ctim.tv_nsec;
  return identity;
}

}  // namespace

std::string BaseName(const std::string& name) {
  const size_t slash = name.rfind('/');
  return slash == std::string::npos ? name : name.substr(slash + 1);
}

std::string BackingFileSegmentName(const std::string& component_id, size_t index) {
  return absl::StrCat("/ddo-file-", component_id, "-", index);
}

absl::StatusOr<BackingFiles> BackingFiles::TakeFrom(SafetensorsSet& set, FileSystem* fs) {
  FileSystem& files_fs = fs != nullptr ? *fs : *FileSystem::Default();
  BackingFiles result;
  for (SafetensorsFile& file : set.files) {
    if (!file.fd.valid()) {
      return absl::FailedPreconditionError(
          absl::StrCat("safetensors file ", BaseName(file.name), " has no open descriptor"));
    }
    DDO_ASSIGN_OR_RETURN(struct stat info, files_fs.Stat(file.fd.get(), file.name));
    const auto index = static_cast<uint32_t>(result.files_.size());
    for (const SafetensorsTensor& tensor : file.tensors) {
      result.ranges_.push_back({index, tensor.file_offset, tensor.byte_size});
      result.tensor_bytes_ += tensor.byte_size;
    }
    result.files_.push_back(BackingFile{std::make_shared<const UniqueFd>(std::move(file.fd)),
                                        BaseName(file.name), static_cast<uint64_t>(info.st_size),
                                        IdentityOf(info)});
  }
  return result;
}

absl::StatusOr<BackingFiles> BackingFiles::OfOwnFile(UniqueFd fd, const std::string& name,
                                                     std::vector<FileRange> ranges,
                                                     FileSystem* fs) {
  FileSystem& files_fs = fs != nullptr ? *fs : *FileSystem::Default();
  DDO_ASSIGN_OR_RETURN(struct stat info, files_fs.Stat(fd.get(), name));
  BackingFiles result;
  for (const FileRange& range : ranges) result.tensor_bytes_ += range.bytes;
  result.ranges_ = std::move(ranges);
  result.files_.push_back(BackingFile{std::make_shared<const UniqueFd>(std::move(fd)), name,
                                      static_cast<uint64_t>(info.st_size), IdentityOf(info)});
  return result;
}

}  // namespace ddo
