#include "daemon/stream/warm_slab_cache.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace ddo {

std::string SlabBytesIdentity(const std::string& component_id, const std::string& segment_name) {
  return absl::StrCat(component_id, "/", segment_name);
}

std::string WarmSlabCache::Key(const std::string& device, const std::string& bytes_identity,
                               const std::string& slab_signature) {
  return absl::StrCat(device, "|", bytes_identity, "|", slab_signature);
}

std::optional<WarmSlab> WarmSlabCache::Take(const std::string& key) {
  auto it = slabs_.find(key);
  if (it == slabs_.end()) return std::nullopt;
  WarmSlab taken = std::move(it->second);
  slabs_.erase(it);
  return taken;
}

bool WarmSlabCache::Put(const std::string& key, WarmSlab& slab) {
  if (slabs_.count(key) != 0) return false;
  slabs_.emplace(key, std::move(slab));
  return true;
}

std::optional<WarmSlab> WarmSlabCache::TakeOldest(const std::string& device,
                                                  bool spare_prefetched) {
  auto oldest = slabs_.end();
  for (auto it = slabs_.begin(); it != slabs_.end(); ++it) {
    if (it->second.device != device || (spare_prefetched && it->second.prefetched)) continue;
    if (oldest == slabs_.end() || it->second.last_used < oldest->second.last_used) oldest = it;
  }
  if (oldest == slabs_.end()) return std::nullopt;
  WarmSlab taken = std::move(oldest->second);
  slabs_.erase(oldest);
  return taken;
}

std::vector<WarmSlab> WarmSlabCache::TakeIf(const std::function<bool(const WarmSlab&)>& which) {
  std::vector<WarmSlab> taken;
  for (auto it = slabs_.begin(); it != slabs_.end();) {
    if (which(it->second)) {
      taken.push_back(std::move(it->second));
      it = slabs_.erase(it);
    } else {
      ++it;
    }
  }
  return taken;
}

std::vector<WarmSlab> WarmSlabCache::TakeAll() {
  return TakeIf([](const WarmSlab&) { return true; });
}

void WarmSlabCache::Remember(const std::string& cache_key, SlabRecipe recipe) {
  recipes_[cache_key] = std::move(recipe);
}

std::optional<SlabRecipe> WarmSlabCache::RecipeOf(const std::string& cache_key) const {
  auto it = recipes_.find(cache_key);
  if (it == recipes_.end()) return std::nullopt;
  return it->second;
}

}  // namespace ddo
