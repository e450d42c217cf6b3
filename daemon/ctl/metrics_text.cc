#include "daemon/ctl/metrics_text.h"

#include <charconv>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ddo {

std::string PrometheusFloat(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Shortest round trip: the fewest digits that read back as the same double.
  char text[32];  // the shortest form of a double takes 24 characters at most
  const std::to_chars_result done = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, done.ptr);
}

namespace {

// A label value as the text format wants it: backslash, double quote and newline escaped.
std::string LabelValue(absl::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Number(double value) { return PrometheusFloat(value); }
std::string Number(uint64_t value) { return absl::StrCat(value); }

class Exposition {
 public:
  // Starts a metric family: its HELP and TYPE lines.
  void Family(absl::string_view name, absl::string_view type, absl::string_view help) {
    absl::StrAppend(&text_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  }
  void Sample(absl::string_view name, absl::string_view labels, const std::string& value) {
    absl::StrAppend(&text_, name, labels.empty() ? "" : "{", labels, labels.empty() ? "" : "}",
                    " ", value, "\n");
  }
  template <typename T>
  void One(absl::string_view name, absl::string_view type, absl::string_view help, T value) {
    Family(name, type, help);
    Sample(name, "", Number(value));
  }
  std::string text() && { return std::move(text_); }

 private:
  std::string text_;
};

// ddod's version, protocol, preset and backend, uptime, leases and sessions.
void AppendDaemonMetrics(const ddo::v1::DaemonInfo& info, const ddo::v1::Stats& stats,
                         Exposition* out) {
  out->Family("ddo_info", "gauge", "ddod's version, protocol, preset and backend (always 1).");
  out->Sample("ddo_info",
              absl::StrCat("version=\"", LabelValue(info.version()), "\",protocol=\"",
                           LabelValue(info.api_version()), "\",preset=\"",
                           LabelValue(info.effective_preset()), "\",backend=\"",
                           LabelValue(ddo::v1::Backend_Name(info.backend())), "\""),
              "1");
  out->One("ddo_uptime_seconds", "gauge", "Seconds since ddod started.", stats.uptime_seconds());
  out->One("ddo_leases", "gauge", "Connected clients (leases).", uint64_t{stats.leases()});
  out->One("ddo_sessions", "gauge", "Open attach and streaming sessions.",
           uint64_t{stats.sessions()});
}

// The host pool: budget, reservations, pinning, contents, evictions.
void AppendPoolMetrics(const ddo::v1::PoolStats& pool, Exposition* out) {
  out->One("ddo_pool_budget_bytes", "gauge", "RAM budget of the host pool.", pool.budget_bytes());
  out->One("ddo_pool_reserved_bytes", "gauge",
           "Bytes of the pool's shared-memory segments (2 MiB granules), uploads included.",
           pool.reserved_bytes());
  out->One("ddo_pool_pinned_bytes", "gauge", "Bytes of the pool page-locked for DMA.",
           pool.pinned_bytes());
  out->One("ddo_pool_used_bytes", "gauge", "Tensor bytes of the ready components.",
           pool.used_bytes());
  out->One("ddo_pool_components", "gauge", "Ready components in the pool.",
           uint64_t{pool.components()});
  out->One("ddo_pool_segments", "gauge", "Shared-memory segments of the pool.",
           uint64_t{pool.segments()});
  out->One("ddo_pool_adopted_components", "gauge",
           "Components adopted at start from the previous ddod's pool (warm restart).",
           uint64_t{pool.adopted()});
  out->One("ddo_pool_evictions_total", "counter",
           "Components evicted since start: to make room in the pool, or unused past their "
           "keep-alive.",
           pool.evictions());
  out->One("ddo_pool_file_bytes", "gauge",
           "Tensor bytes of ready components served from their files (the file tier).",
           pool.file_bytes());
  out->One("ddo_pool_backing_files", "gauge",
           "File descriptors ddod holds for file-tier components.", uint64_t{pool.backing_files()});
  out->One("ddo_pool_spilled_bytes", "gauge",
           "Bytes of uploads spilled to files on the state directory's disk.",
           pool.spilled_bytes());
  out->One("ddo_pool_prefaulted_bytes", "gauge",
           "Shared memory allocated ahead of the next load (the pre-faulted reserve), ready or "
           "being made; not in ddo_pool_reserved_bytes.",
           pool.prefaulted_bytes());
  out->One("ddo_pool_outside_bytes", "gauge",
           "Private memory of ddod and of the runners holding leases, counted in the RAM "
           "budget beside the pool (--ram-budget-scope runners; 0 otherwise); not in "
           "ddo_pool_reserved_bytes.",
           pool.outside_bytes());
  out->One("ddo_pool_held_bytes", "gauge",
           "RAM under the pool's budget outside its segments: host sessions' slabs and rings, "
           "file-tier staging.",
           pool.held_bytes());
}

// The streaming totals since start.
void AppendStreamMetrics(const ddo::v1::StreamTotals& stream, Exposition* out) {
  out->One("ddo_stream_sessions_opened_total", "counter", "Streaming sessions opened.",
           stream.sessions_opened());
  out->One("ddo_stream_bytes_total", "counter",
           "Bytes copied into streaming rings (H2D on a GPU); rate() of it is the achieved "
           "bandwidth.",
           stream.bytes_streamed());
  out->One("ddo_stream_units_total", "counter", "Units copied into streaming rings.",
           stream.units_streamed());
  out->One("ddo_stream_slab_fill_bytes_total", "counter",
           "Bytes copied into resident slabs (a warm slab is not filled again).",
           stream.slab_bytes_filled());
  out->One("ddo_stream_warm_slab_hits_total", "counter",
           "Sessions that found their resident slab warm.", stream.warm_slab_hits());
  out->One("ddo_stream_warm_slab_misses_total", "counter",
           "Sessions whose resident slab had to be filled.", stream.warm_slab_misses());
  out->One("ddo_stream_runner_waits_total", "counter",
           "Units published while the runner was blocked waiting for one (stalls).",
           stream.runner_waits());
  out->One("ddo_stream_file_bytes_read_total", "counter",
           "Bytes file-tier sessions read from backing files into staging buffers.",
           stream.file_bytes_read());
  out->One("ddo_stream_staging_waits_total", "counter",
           "Times a file-tier unit waited for a free staging buffer.", stream.staging_waits());
}

// Answered RPCs by method and result.
void AppendRpcCounts(const ddo::v1::Stats& stats, Exposition* out) {
  out->Family("ddo_rpc_requests_total", "counter", "Answered RPCs by method and result.");
  for (const ddo::v1::RpcCount& rpc : stats.rpcs()) {
    const std::string method = LabelValue(rpc.method());
    out->Sample("ddo_rpc_requests_total", absl::StrCat("method=\"", method, "\",result=\"ok\""),
                Number(rpc.ok()));
    out->Sample("ddo_rpc_requests_total", absl::StrCat("method=\"", method, "\",result=\"failed\""),
                Number(rpc.failed()));
  }
}

// The RPC latency histogram by method (buckets as ddod counts them).
void AppendRpcLatencies(const ddo::v1::Stats& stats, Exposition* out) {
  out->Family("ddo_rpc_duration_seconds", "histogram",
              "Seconds from a call's arrival to its answer, by method (the lease stream is not "
              "timed).");
  for (const ddo::v1::RpcCount& rpc : stats.rpcs()) {
    if (rpc.timed() == 0) continue;
    const std::string method = LabelValue(rpc.method());
    for (int i = 0; i < rpc.at_most_size() && i < stats.latency_bucket_seconds_size(); ++i) {
      out->Sample("ddo_rpc_duration_seconds_bucket",
                  absl::StrCat("method=\"", method, "\",le=\"",
                               PrometheusFloat(stats.latency_bucket_seconds(i)), "\""),
                  Number(rpc.at_most(i)));
    }
    out->Sample("ddo_rpc_duration_seconds_bucket",
                absl::StrCat("method=\"", method, "\",le=\"+Inf\""), Number(rpc.timed()));
    out->Sample("ddo_rpc_duration_seconds_sum", absl::StrCat("method=\"", method, "\""),
                Number(rpc.seconds_sum()));
    out->Sample("ddo_rpc_duration_seconds_count", absl::StrCat("method=\"", method, "\""),
                Number(rpc.timed()));
  }
}

}  // namespace

std::string FormatMetrics(const ddo::v1::DaemonInfo& info, const ddo::v1::Stats& stats) {
  Exposition out;
  AppendDaemonMetrics(info, stats, &out);
  AppendPoolMetrics(stats.pool(), &out);
  AppendStreamMetrics(stats.stream(), &out);
  AppendRpcCounts(stats, &out);
  AppendRpcLatencies(stats, &out);
  return std::move(out).text();
}

}  // namespace ddo
