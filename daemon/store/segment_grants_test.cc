#include "daemon/store/segment_grants.h"

#include "daemon/stream/session_grants.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::IsEmpty;

auto Granted(const std::string& name, bool writable) {
  return ::testing::AllOf(Field(&SegmentGrant::shm_name, name),
                          Field(&SegmentGrant::writable, writable));
}

// A derived version: its own segment first, then the base's it shares.
ComponentSnapshot DerivedVersion() {
  ComponentSnapshot snapshot;
  snapshot.segment_name = "/ddo-own";
  snapshot.segments = {{"/ddo-own", 4096}, {"/ddo-base", 8192}};
  return snapshot;
}

TEST(SegmentGrantsTest, AComponentsSegmentsAreReadOnlyTheSharedOnesToo) {
  EXPECT_THAT(ReadGrants(DerivedVersion()),
              ElementsAre(Granted("/ddo-own", false), Granted("/ddo-base", false)));
}

TEST(SegmentGrantsTest, AnUploadWritesItsOwnSegmentOnly) {
  EXPECT_THAT(UploadGrants(DerivedVersion()), ElementsAre(Granted("/ddo-own", true)));
  EXPECT_THAT(UploadGrants(ComponentSnapshot{}), IsEmpty());
}

TEST(SessionGrantsTest, TheRunnerWritesItsControlBlockAndDoorbellAndReadsTheRest) {
  OpenedStream opened;
  opened.component = DerivedVersion();
  opened.control_block_shm = "/ddo-control";
  opened.doorbell_shm = "/ddo-doorbell";
  opened.memory.resident_slab_shm = "/ddo-slab";
  opened.memory.ring_shm = "/ddo-ring";
  EXPECT_THAT(SessionGrants(opened),
              ElementsAre(Granted("/ddo-own", false), Granted("/ddo-base", false),
                          Granted("/ddo-control", true), Granted("/ddo-doorbell", true),
                          Granted("/ddo-slab", false), Granted("/ddo-ring", false)));
}

TEST(SessionGrantsTest, AGpuSessionGrantsNoSlabOrRingSegment) {
  OpenedStream opened;
  opened.component = DerivedVersion();
  opened.control_block_shm = "/ddo-control";
  opened.doorbell_shm = "/ddo-doorbell";
  EXPECT_THAT(SessionGrants(opened),
              ElementsAre(Granted("/ddo-own", false), Granted("/ddo-base", false),
                          Granted("/ddo-control", true), Granted("/ddo-doorbell", true)));
}

}  // namespace
}  // namespace ddo
