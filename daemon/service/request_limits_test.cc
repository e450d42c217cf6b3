// File: daemon/service/request_limits_test.cc
#include "daemon/service/request_limits.h"

#include <functional>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Bytes that must never reach a message raw.
constexpr char kClearScreen[] = "\x1b[2J";

ddo::v1::TensorSpec Linear(const std::string& path) {
  ddo::v1::TensorSpec tensor;
  tensor.set_name(path + ".weight");
  tensor.set_dtype(ddo::v1::DTYPE_BF16);
  tensor.add_shape(1024);
  tensor.add_shape(1024);
  tensor.set_byte_size(1024 * 1024 * 2);
  tensor.set_module_path(path);
  tensor.set_module_class("Linear");
  return tensor;
}

// `set` writes one string field of `normal`; the checker must bound it to `limit` bytes and
// refuse control characters in it, naming `field` and never echoing the bad bytes.
template <typename Request>
void ExpectStringFieldIsBounded(const Request& normal, absl::string_view field, size_t limit,
                                const std::function<void(Request*, const std::string&)>& set,
                                bool control_characters_refused = true) {
  SCOPED_TRACE(std::string(field));
  ASSERT_TRUE(CheckRequest(normal).ok()) << CheckRequest(normal);

  Request request = normal;
  set(&request, std::string(limit, 'k'));
  EXPECT_TRUE(CheckRequest(request).ok()) << CheckRequest(request);

  set(&request, std::string(limit + 1, 'k'));
  absl::Status status = CheckRequest(request);
  ASSERT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr(std::string(field)));
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("at most ", limit)));
  EXPECT_LT(status.message().size(), 400u);  // a short prefix of the value only

  if (!control_characters_refused) return;
  for (const std::string& bad : {std::string("key\nwith newline"), std::string(kClearScreen),
                                 std::string("nul\0inside", 10), std::string("del\x7f"),
                                 std::string("c1 csi \xc2\x9b" "2J")}) {
    request = normal;
    set(&request, bad);
    status = CheckRequest(request);
    ASSERT_TRUE(absl::IsInvalidArgument(status)) << bad << ": " << status;
    EXPECT_THAT(status.message(), HasSubstr(std::string(field)));
    EXPECT_THAT(status.message(), HasSubstr("control character"));
    EXPECT_THAT(status.message(), Not(HasSubstr("\n")));
    EXPECT_THAT(status.message(), Not(HasSubstr("\x1b")));
    EXPECT_THAT(std::string(status.message()), Not(HasSubstr(std::string(1, '\0'))));
  }
}

template <typename Request>
void ExpectCountIsBounded(const Request& normal, absl::string_view field, size_t limit,
                          const std::function<void(Request*, size_t)>& fill) {
  SCOPED_TRACE(std::string(field));
  Request request = normal;
  fill(&request, limit);
  EXPECT_TRUE(CheckRequest(request).ok()) << CheckRequest(request);
  request = normal;
  fill(&request, limit + 1);
  absl::Status status = CheckRequest(request);
  ASSERT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr(std::string(field)));
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("at most ", limit)));
}

using SettingsMap = google::protobuf::Map<std::string, std::string>;

template <typename Request>
void ExpectSettingsAreBounded(const Request& normal, absl::string_view field,
                              const std::function<SettingsMap*(Request*)>& settings) {
  ExpectStringFieldIsBounded<Request>(normal, absl::StrCat(field, " (a key)"),
                                      kMaxSettingNameBytes, [&](Request* r, const std::string& v) {
                                        (*settings(r))[v] = "1";
                                      });
  ExpectStringFieldIsBounded<Request>(normal, absl::StrCat(field, "['DDO_X']"),
                                      kMaxSettingValueBytes, [&](Request* r, const std::string& v) {
                                        (*settings(r))["DDO_X"] = v;
                                      });
  ExpectCountIsBounded<Request>(normal, field, kMaxSettingsEntries, [&](Request* r, size_t n) {
    settings(r)->clear();
    for (size_t i = 0; i < n; ++i) (*settings(r))[absl::StrCat("DDO_S", i)] = "1";
  });
  // A tab is fine in a value.
  Request request = normal;
  (*settings(&request))["DDO_X"] = "a\tb";
  EXPECT_TRUE(CheckRequest(request).ok());
}

TEST(RequestLimitsTest, RequestsWithoutFieldsPass) {
  EXPECT_TRUE(CheckRequest(ddo::v1::GetInfoRequest()).ok());
  EXPECT_TRUE(CheckRequest(ddo::v1::GetStatsRequest()).ok());
  EXPECT_TRUE(CheckRequest(ddo::v1::ListPresetsRequest()).ok());
  EXPECT_TRUE(CheckRequest(ddo::v1::ListComponentsRequest()).ok());
  EXPECT_TRUE(CheckRequest(ddo::v1::ListSessionsRequest()).ok());
}

TEST(RequestLimitsTest, ResolveSettings) {
  using R = ddo::v1::ResolveSettingsRequest;
  R normal;
  normal.set_preset("auto");
  (*normal.mutable_environment())["DDO_PIN_CPU_MEMORY"] = "1";
  (*normal.mutable_overrides())["DDO_ALWAYS_RESIDENT_MODULE_PATTERNS"] = "(^|\\.)proj_in(\\.|$)";
  normal.add_components("transformer");
  (*(*normal.mutable_component_policies())["vae"].mutable_values())["offload_type"] = "block_level";
  ExpectStringFieldIsBounded<R>(normal, "ResolveSettingsRequest.preset", kMaxPresetNameBytes,
                                [](R* r, const std::string& v) { r->set_preset(v); });
  ExpectStringFieldIsBounded<R>(normal, "ResolveSettingsRequest.components[1]",
                                kMaxComponentNameBytes,
                                [](R* r, const std::string& v) {
                                  r->clear_components();
                                  r->add_components("transformer");
                                  r->add_components(v);
                                });
  ExpectStringFieldIsBounded<R>(
      normal, "ResolveSettingsRequest.component_policies (a key)", kMaxComponentNameBytes,
      [](R* r, const std::string& v) { (*r->mutable_component_policies())[v]; });
  ExpectStringFieldIsBounded<R>(
      normal, "ResolveSettingsRequest.component_policies['vae'].values['offload_type']",
      kMaxSettingValueBytes, [](R* r, const std::string& v) {
        (*(*r->mutable_component_policies())["vae"].mutable_values())["offload_type"] = v;
      });
  ExpectSettingsAreBounded<R>(normal, "ResolveSettingsRequest.environment",
                              [](R* r) { return r->mutable_environment(); });
  ExpectSettingsAreBounded<R>(normal, "ResolveSettingsRequest.overrides",
                              [](R* r) { return r->mutable_overrides(); });
  ExpectCountIsBounded<R>(normal, "ResolveSettingsRequest.components", kMaxComponents,
                          [](R* r, size_t n) {
                            r->clear_components();
                            for (size_t i = 0; i < n; ++i) r->add_components("c");
                          });
}

TEST(RequestLimitsTest, ExplainPlan) {
  using R = ddo::v1::ExplainPlanRequest;
  R normal;
  *normal.add_tensors() = Linear("transformer_blocks.0.attn.to_q");
  normal.set_device_uuid("GPU-3adf1d52-0000-0000-0000-000000000000");
  normal.set_component("transformer");
  (*normal.mutable_settings())["DDO_SMALL_TENSOR_THRESHOLD_KB"] = "0";
  ExpectStringFieldIsBounded<R>(normal, "ExplainPlanRequest.tensors[0].name", kMaxTensorNameBytes,
                                [](R* r, const std::string& v) {
                                  r->mutable_tensors(0)->set_name(v);
                                });
  ExpectStringFieldIsBounded<R>(
      normal, "ExplainPlanRequest.tensors[0].module_path", kMaxTensorNameBytes,
      [](R* r, const std::string& v) { r->mutable_tensors(0)->set_module_path(v); });
  ExpectStringFieldIsBounded<R>(
      normal, "ExplainPlanRequest.tensors[0].module_class", kMaxModuleClassBytes,
      [](R* r, const std::string& v) { r->mutable_tensors(0)->set_module_class(v); });
  ExpectStringFieldIsBounded<R>(normal, "ExplainPlanRequest.device_uuid", kMaxIdBytes,
                                [](R* r, const std::string& v) { r->set_device_uuid(v); });
  ExpectStringFieldIsBounded<R>(normal, "ExplainPlanRequest.component", kMaxComponentNameBytes,
                                [](R* r, const std::string& v) { r->set_component(v); });
  ExpectSettingsAreBounded<R>(normal, "ExplainPlanRequest.settings",
                              [](R* r) { return r->mutable_settings(); });
  R bad = normal;
  bad.mutable_tensors(0)->set_dtype(static_cast<ddo::v1::DType>(99));
  absl::Status status = CheckRequest(bad);
  EXPECT_TRUE(absl::IsInvalidArgument(status));
  EXPECT_THAT(status.message(),
              HasSubstr("ExplainPlanRequest.tensors[0].dtype: 99 is not a known value"));
  bad = normal;
  for (int i = 0; i < 65; ++i) bad.mutable_tensors(0)->add_shape(1);
  EXPECT_TRUE(absl::IsResourceExhausted(CheckRequest(bad)));
}

TEST(RequestLimitsTest, Connect) {
  using R = ddo::v1::ConnectRequest;
  R normal;
  normal.set_client_pid(1234);
  normal.set_client_name("python3 -m my_runner");
  ExpectStringFieldIsBounded<R>(normal, "ConnectRequest.client_name", kMaxClientNameBytes,
                                [](R* r, const std::string& v) { r->set_client_name(v); });
}

TEST(RequestLimitsTest, RegisterComponent) {
  using R = ddo::v1::RegisterComponentRequest;
  R normal;
  normal.set_lease_id("0123456789abcdef0123456789abcdef");
  normal.set_cache_key("stabilityai/sdxl@main/unet:bf16");
  normal.set_content_hash("xxh3-64:0123456789abcdef");
  *normal.add_tensors() = Linear("blocks.0.ff");
  *normal.add_tensors() = Linear("blocks.1.ff");
  ExpectStringFieldIsBounded<R>(normal, "RegisterComponentRequest.cache_key", kMaxCacheKeyBytes,
                                [](R* r, const std::string& v) { r->set_cache_key(v); });
  ExpectStringFieldIsBounded<R>(normal, "RegisterComponentRequest.lease_id", kMaxIdBytes,
                                [](R* r, const std::string& v) { r->set_lease_id(v); });
  ExpectStringFieldIsBounded<R>(normal, "RegisterComponentRequest.content_hash", kMaxHashBytes,
                                [](R* r, const std::string& v) { r->set_content_hash(v); });
  ExpectStringFieldIsBounded<R>(
      normal, "RegisterComponentRequest.tensors[1].name", kMaxTensorNameBytes,
      [](R* r, const std::string& v) { r->mutable_tensors(1)->set_name(v); });
  R bad = normal;
  bad.mutable_tensors(1)->set_dtype(static_cast<ddo::v1::DType>(-5));
  EXPECT_THAT(CheckRequest(bad).message(), HasSubstr("tensors[1].dtype: -5 is not a known value"));
}

TEST(RequestLimitsTest, RegisterDerivedComponent) {
  using R = ddo::v1::RegisterComponentRequest;
  R normal;
  normal.set_lease_id("0123456789abcdef0123456789abcdef");
  normal.set_cache_key("sdxl/unet+lora:0123");
  normal.set_base_cache_key("stabilityai/sdxl@main/unet:bf16");
  normal.set_content_hash("xxh3-64:0123456789abcdef");
  normal.add_changed_tensors("blocks.0.ff.weight");
  normal.add_changed_tensors("blocks.1.ff.weight");
  ExpectStringFieldIsBounded<R>(normal, "RegisterComponentRequest.base_cache_key",
                                kMaxCacheKeyBytes,
                                [](R* r, const std::string& v) { r->set_base_cache_key(v); });
  ExpectStringFieldIsBounded<R>(normal, "RegisterComponentRequest.changed_tensors[1]",
                                kMaxTensorNameBytes, [](R* r, const std::string& v) {
                                  r->set_changed_tensors(1, v);
                                });
  R many = normal;
  many.clear_changed_tensors();
  for (size_t i = 0; i <= kMaxTensors; ++i) many.add_changed_tensors("w");
  absl::Status status = CheckRequest(many);
  EXPECT_TRUE(absl::IsResourceExhausted(status));
  EXPECT_THAT(status.message(), HasSubstr("RegisterComponentRequest.changed_tensors"));
}

TEST(RequestLimitsTest, CommitAndAbortUpload) {
  ddo::v1::CommitUploadRequest commit;
  commit.set_lease_id("lease");
  commit.set_upload_id("upload");
  ExpectStringFieldIsBounded<ddo::v1::CommitUploadRequest>(
      commit, "CommitUploadRequest.upload_id", kMaxIdBytes,
      [](ddo::v1::CommitUploadRequest* r, const std::string& v) { r->set_upload_id(v); });
  ExpectStringFieldIsBounded<ddo::v1::CommitUploadRequest>(
      commit, "CommitUploadRequest.lease_id", kMaxIdBytes,
      [](ddo::v1::CommitUploadRequest* r, const std::string& v) { r->set_lease_id(v); });
  ddo::v1::AbortUploadRequest abort;
  abort.set_lease_id("lease");
  abort.set_upload_id("upload");
  ExpectStringFieldIsBounded<ddo::v1::AbortUploadRequest>(
      abort, "AbortUploadRequest.upload_id", kMaxIdBytes,
      [](ddo::v1::AbortUploadRequest* r, const std::string& v) { r->set_upload_id(v); });
}

TEST(RequestLimitsTest, LoadSafetensors) {
  using R = ddo::v1::LoadSafetensorsRequest;
  R normal;
  normal.set_lease_id("lease");
  normal.set_cache_key("model/unet");
  normal.add_files("/models/unet/diffusion_pytorch_model.safetensors");
  normal.set_index_file("/models/unet/diffusion_pytorch_model.safetensors.index.json");
  (*normal.mutable_units())["blocks.0.ff.weight"] = 0;
  normal.add_file_handles(1);
  normal.set_index_handle(2);
  ExpectStringFieldIsBounded<R>(normal, "LoadSafetensorsRequest.cache_key", kMaxCacheKeyBytes,
                                [](R* r, const std::string& v) { r->set_cache_key(v); });
  ExpectStringFieldIsBounded<R>(normal, "LoadSafetensorsRequest.files[0]", kMaxPathBytes,
                                [](R* r, const std::string& v) { r->set_files(0, v); });
  ExpectStringFieldIsBounded<R>(normal, "LoadSafetensorsRequest.index_file", kMaxPathBytes,
                                [](R* r, const std::string& v) { r->set_index_file(v); });
  ExpectStringFieldIsBounded<R>(normal, "LoadSafetensorsRequest.units (a key)", kMaxTensorNameBytes,
                                [](R* r, const std::string& v) { (*r->mutable_units())[v] = 1; });
  ExpectCountIsBounded<R>(normal, "LoadSafetensorsRequest.file_handles", kMaxFileHandles,
                          [](R* r, size_t n) {
                            r->clear_file_handles();
                            for (size_t i = 0; i < n; ++i) r->add_file_handles(i + 1);
                          });
  ExpectCountIsBounded<R>(normal, "LoadSafetensorsRequest.files", kMaxFiles, [](R* r, size_t n) {
    r->clear_files();
    for (size_t i = 0; i < n; ++i) r->add_files("/m/a.safetensors");
  });
  for (ddo::v1::FileTier tier : {ddo::v1::FILE_TIER_AUTO, ddo::v1::FILE_TIER_NEVER,
                                 ddo::v1::FILE_TIER_PREFER}) {
    R known = normal;
    known.set_file_tier(tier);
    EXPECT_TRUE(CheckRequest(known).ok()) << tier;
  }
  // An enum value off the wire (proto3 keeps unknown values) is refused.
  std::string wire;
  ASSERT_TRUE(normal.SerializeToString(&wire));
  wire += std::string("\x50\x07", 2);  // field 10 (file_tier), varint 7
  R parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire));
  const absl::Status status = CheckRequest(parsed);
  EXPECT_TRUE(absl::IsInvalidArgument(status));
  EXPECT_THAT(status.message(),
              HasSubstr("LoadSafetensorsRequest.file_tier: 7 is not a known value"));
}

TEST(RequestLimitsTest, GetAndEvictComponent) {
  ddo::v1::GetComponentRequest get;
  get.set_cache_key("model/unet");
  get.set_with_layout(true);
  ExpectStringFieldIsBounded<ddo::v1::GetComponentRequest>(
      get, "GetComponentRequest.cache_key", kMaxCacheKeyBytes,
      [](ddo::v1::GetComponentRequest* r, const std::string& v) { r->set_cache_key(v); });
  ddo::v1::EvictComponentRequest evict;
  evict.set_cache_key("model/unet");
  ExpectStringFieldIsBounded<ddo::v1::EvictComponentRequest>(
      evict, "EvictComponentRequest.cache_key", kMaxCacheKeyBytes,
      [](ddo::v1::EvictComponentRequest* r, const std::string& v) { r->set_cache_key(v); });
}

TEST(RequestLimitsTest, Attach) {
  using R = ddo::v1::AttachRequest;
  R normal;
  normal.set_lease_id("lease");
  normal.set_cache_key("model/unet");
  normal.set_device_uuid("cpu");
  (*normal.mutable_settings())["DDO_RING_SLOTS"] = "4";
  normal.add_streamable("blocks.0.ff.weight");
  ExpectStringFieldIsBounded<R>(normal, "AttachRequest.cache_key", kMaxCacheKeyBytes,
                                [](R* r, const std::string& v) { r->set_cache_key(v); });
  ExpectStringFieldIsBounded<R>(normal, "AttachRequest.device_uuid", kMaxIdBytes,
                                [](R* r, const std::string& v) { r->set_device_uuid(v); });
  ExpectStringFieldIsBounded<R>(normal, "AttachRequest.streamable[0]", kMaxTensorNameBytes,
                                [](R* r, const std::string& v) { r->set_streamable(0, v); });
  ExpectSettingsAreBounded<R>(normal, "AttachRequest.settings",
                              [](R* r) { return r->mutable_settings(); });
}

TEST(RequestLimitsTest, DetachAndSetSchedule) {
  ddo::v1::DetachRequest detach;
  detach.set_session_id("session");
  ExpectStringFieldIsBounded<ddo::v1::DetachRequest>(
      detach, "DetachRequest.session_id", kMaxIdBytes,
      [](ddo::v1::DetachRequest* r, const std::string& v) { r->set_session_id(v); });
  using R = ddo::v1::SetScheduleRequest;
  R schedule;
  schedule.set_session_id("session");
  schedule.add_unit_order(0);
  ExpectStringFieldIsBounded<R>(schedule, "SetScheduleRequest.session_id", kMaxIdBytes,
                                [](R* r, const std::string& v) { r->set_session_id(v); });
  ExpectCountIsBounded<R>(schedule, "SetScheduleRequest.unit_order", kMaxScheduleUses,
                          [](R* r, size_t n) {
                            r->clear_unit_order();
                            r->mutable_unit_order()->Resize(static_cast<int>(n), 0);
                          });
}

TEST(RequestLimitsTest, Phase) {
  using R = ddo::v1::PhaseRequest;
  R normal;
  normal.set_lease_id("lease");
  normal.set_phase(ddo::v1::PHASE_KIND_DENOISE);
  normal.add_needed("model/unet");
  normal.add_prefetch("model/vae");
  ExpectStringFieldIsBounded<R>(normal, "PhaseRequest.needed[0]", kMaxCacheKeyBytes,
                                [](R* r, const std::string& v) { r->set_needed(0, v); });
  ExpectStringFieldIsBounded<R>(normal, "PhaseRequest.prefetch[0]", kMaxCacheKeyBytes,
                                [](R* r, const std::string& v) { r->set_prefetch(0, v); });
  ExpectStringFieldIsBounded<R>(normal, "PhaseRequest.lease_id", kMaxIdBytes,
                                [](R* r, const std::string& v) { r->set_lease_id(v); });
  R bad = normal;
  bad.set_phase(static_cast<ddo::v1::PhaseKind>(42));
  absl::Status status = CheckRequest(bad);
  EXPECT_TRUE(absl::IsInvalidArgument(status));
  EXPECT_THAT(status.message(), HasSubstr("PhaseRequest.phase: 42 is not a known value"));
  // Unset is the handler's to explain.
  bad.set_phase(ddo::v1::PHASE_KIND_UNSPECIFIED);
  EXPECT_TRUE(CheckRequest(bad).ok());
  // An enum value off the wire (proto3 keeps unknown values) is refused too.
  std::string wire;
  ASSERT_TRUE(normal.SerializeToString(&wire));
  wire += std::string("\x10\xe7\x07", 3);  // field 2 (phase), varint 999
  R parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire));
  EXPECT_TRUE(absl::IsInvalidArgument(CheckRequest(parsed)));
}

TEST(RequestLimitsTest, Profiles) {
  constexpr char kKey[] = "0123456789abcdef01234567";
  ddo::v1::ListProfilesRequest list;
  list.set_profile_dir("/home/me/.ddo/profiles");
  ExpectStringFieldIsBounded<ddo::v1::ListProfilesRequest>(
      list, "ListProfilesRequest.profile_dir", kMaxPathBytes,
      [](ddo::v1::ListProfilesRequest* r, const std::string& v) { r->set_profile_dir(v); });

  ddo::v1::GetProfileRequest get;
  get.mutable_ref()->set_key(kKey);
  ExpectStringFieldIsBounded<ddo::v1::GetProfileRequest>(
      get, "GetProfileRequest.ref.key", kMaxProfileKeyBytes,
      [](ddo::v1::GetProfileRequest* r, const std::string& v) { r->mutable_ref()->set_key(v); });
  ExpectStringFieldIsBounded<ddo::v1::GetProfileRequest>(
      get, "GetProfileRequest.ref.name", kMaxProfileNameBytes,
      [](ddo::v1::GetProfileRequest* r, const std::string& v) { r->mutable_ref()->set_name(v); });

  using P = ddo::v1::PutProfileRequest;
  P put;
  put.mutable_profile()->mutable_ref()->set_key(kKey);
  put.mutable_profile()->set_json("{\n  \"profile_key\": \"0123456789abcdef01234567\"\n}\n");
  ExpectStringFieldIsBounded<P>(put, "PutProfileRequest.profile.ref.key", kMaxProfileKeyBytes,
                                [](P* r, const std::string& v) {
                                  r->mutable_profile()->mutable_ref()->set_key(v);
                                });
  // JSON text has newlines: bounded in size only; its form is the profile store's to check.
  ExpectStringFieldIsBounded<P>(
      put, "PutProfileRequest.profile.json", kMaxProfileJsonBytes,
      [](P* r, const std::string& v) { r->mutable_profile()->set_json(v); },
      /*control_characters_refused=*/false);

  ddo::v1::DeleteProfileRequest del;
  del.mutable_ref()->set_key(kKey);
  ExpectStringFieldIsBounded<ddo::v1::DeleteProfileRequest>(
      del, "DeleteProfileRequest.ref.key", kMaxProfileKeyBytes,
      [](ddo::v1::DeleteProfileRequest* r, const std::string& v) { r->mutable_ref()->set_key(v); });
}

TEST(RequestLimitsTest, FileNames) {
  EXPECT_TRUE(CheckFileName("diffusion_pytorch_model-00001-of-00002.safetensors").ok());
  EXPECT_TRUE(CheckFileName(std::string(kMaxFileNameBytes, 'f')).ok());
  for (const std::string& bad :
       {std::string(), std::string("."), std::string(".."), std::string("a/b"),
        std::string(kMaxFileNameBytes + 1, 'f'), std::string("a\nb"), std::string(kClearScreen),
        std::string("a\0b", 3)}) {
    absl::Status status = CheckFileName(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << bad;
    EXPECT_THAT(status.message(), HasSubstr("FILE.name"));
    EXPECT_THAT(status.message(), Not(HasSubstr("\x1b")));
  }
}

TEST(RequestLimitsTest, HugeStringsAreReportedInAFewBytes) {
  // Four 20 MiB keys once broke ListComponents for every client.
  ddo::v1::RegisterComponentRequest request;
  request.set_cache_key(std::string(20 << 20, 'k'));
  absl::Status status = CheckRequest(request);
  ASSERT_TRUE(absl::IsInvalidArgument(status));
  EXPECT_LT(status.message().size(), 200u);
  EXPECT_THAT(status.message(), HasSubstr("20971520 bytes, at most 512 allowed"));
}

}  // namespace
}  // namespace ddo
