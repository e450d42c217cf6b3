#include "daemon/store/segment_grants.h"

#include "absl/strings/str_cat.h"

namespace ddo {

std::vector<SegmentGrant> ReadGrants(const ComponentSnapshot& component) {
  std::vector<SegmentGrant> grants;
  grants.reserve(component.segments.size());
  if (component.files != nullptr) {
    const std::vector<BackingFile>& files = component.files->files();
    for (size_t index = 0; index < files.size(); ++index) {
      grants.push_back(SegmentGrant::File(
          BackingFileSegmentName(component.component_id, index), files[index].fd));
    }
  }
  for (const ComponentSnapshot::Segment& segment : component.segments) {
    grants.push_back({segment.name, /*writable=*/false});
  }
  return grants;
}

std::vector<SegmentGrant> UploadGrants(const ComponentSnapshot& component) {
  if (component.segment_name.empty()) return {};
  return {{component.segment_name, /*writable=*/true}};
}

std::vector<SegmentGrant> StreamGrants(
    const std::string& upload_id,
    const std::vector<std::shared_ptr<const UniqueFd>>& write_ends) {
  std::vector<SegmentGrant> grants;
  grants.reserve(write_ends.size());
  for (size_t stream = 0; stream < write_ends.size(); ++stream) {
    grants.push_back(SegmentGrant::Pipe(absl::StrCat("/ddo-stream-", upload_id, "-", stream),
                                        write_ends[stream]));
  }
  return grants;
}

}  // namespace ddo
