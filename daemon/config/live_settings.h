// File: daemon/config/live_settings.h
//
// ddod's own DDO_* settings layer (its environment and --config file, SettingVariables), as
// the handlers read it: replaced as a whole when a SIGHUP reload reads the file again, so that
// a request resolves against one consistent layer, the old or the new.
//
// Thread-safety: Snapshot() and Replace() may be called from any thread.
#ifndef DDO_DAEMON_CONFIG_LIVE_SETTINGS_H_
#define DDO_DAEMON_CONFIG_LIVE_SETTINGS_H_

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ddo {

class LiveSettings {
 public:
  using Layer = std::map<std::string, std::string>;

  explicit LiveSettings(Layer layer) : layer_(std::make_shared<const Layer>(std::move(layer))) {}

  std::shared_ptr<const Layer> Snapshot() const {
    absl::MutexLock lock(&mutex_);
    return layer_;
  }

  void Replace(Layer layer) {
    auto fresh = std::make_shared<const Layer>(std::move(layer));
    absl::MutexLock lock(&mutex_);
    layer_ = std::move(fresh);
  }

 private:
  mutable absl::Mutex mutex_;
  std::shared_ptr<const Layer> layer_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace ddo

#endif  // DDO_DAEMON_CONFIG_LIVE_SETTINGS_H_
