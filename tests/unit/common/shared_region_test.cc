// The shared region of the push/pull data plane (services/common/wire/shared_region.h): what one
// side writes the other reads; the descriptor goes to the one taker that presents the offer's
// bytes, after which no descriptor of either side names the region; an offer for anything but
// the region it was made for is refused.
#include "services/common/wire/shared_region.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strata {
namespace {

using ::testing::HasSubstr;

constexpr size_t kArea = 10000;  // not a whole number of pages

// The creator's side of the hand-over, on a thread of its own (both sides are in this process).
struct HandOverThread {
  explicit HandOverThread(SharedRegion* region) {
    EXPECT_EQ(pipe(abandon), 0);
    thread = std::thread(
        [this, region] { handed = region->HandOver(abandon[0], std::chrono::seconds(30)); });
  }
  bool Finish() {
    (void)!write(abandon[1], "x", 1);  // ends the wait if nobody took it
    thread.join();
    close(abandon[0]);
    close(abandon[1]);
    return handed;
  }
  int abandon[2] = {-1, -1};
  std::thread thread;
  bool handed = false;
};

// The memfds this process holds a descriptor of.
int MemfdsOpen() {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(entry.path(), ec);
    if (!ec && target.string().rfind("/memfd:strata-push-pull", 0) == 0) ++count;
  }
  return count;
}

TEST(SharedRegion, WhatOneSideWritesTheOtherReadsAndNoDescriptorNamesIt) {
  auto created = SharedRegion::Create(kArea);
  ASSERT_TRUE(created.ok()) << created.status();
  SharedRegion& server = **created;
  EXPECT_EQ(server.offer().region_bytes, SharedRegion::RegionBytes(kArea));
  EXPECT_EQ(server.reply_area() - server.push_area(),
            static_cast<ptrdiff_t>(SharedRegion::AreaSpan(kArea)));
  EXPECT_EQ(MemfdsOpen(), 1);

  HandOverThread hand_over(&server);
  auto attached = SharedRegion::Attach(server.offer(), kArea);
  EXPECT_TRUE(hand_over.Finish());
  ASSERT_TRUE(attached.ok()) << attached.status();
  // Before: the creator kept the descriptor, and anyone of the same user could open the region
  // as /proc/PID/fd/FD. Now both sides hold only their mappings.
  EXPECT_EQ(MemfdsOpen(), 0);
  const SharedRegion& worker = **attached;
  ASSERT_NE(worker.push_area(), server.push_area()) << "a mapping of its own";
  for (size_t i = 0; i < kArea; ++i) worker.push_area()[i] = static_cast<uint8_t>(i * 31);
  for (size_t i = 0; i < kArea; ++i) server.reply_area()[i] = static_cast<uint8_t>(i * 7 + 3);
  for (size_t i = 0; i < kArea; ++i) {
    ASSERT_EQ(server.push_area()[i], static_cast<uint8_t>(i * 31)) << i;
    ASSERT_EQ(worker.reply_area()[i], static_cast<uint8_t>(i * 7 + 3)) << i;
  }
  // The hand-over socket is gone: a second taker finds nothing.
  EXPECT_FALSE(SharedRegion::Attach(server.offer(), kArea).ok());
}

TEST(SharedRegion, AnOfferForAnotherRegionIsRefused) {
  auto created = SharedRegion::Create(kArea);
  ASSERT_TRUE(created.ok()) << created.status();
  const SharedRegionOffer offer = (*created)->offer();

  // The worker expects another partition size.
  EXPECT_THAT(std::string(SharedRegion::Attach(offer, kArea * 2).status().message()),
              HasSubstr("expected"));
  // A socket that is not there (another host or network namespace).
  SharedRegionOffer other = offer;
  other.socket_id ^= 1;
  EXPECT_THAT(std::string(SharedRegion::Attach(other, kArea).status().message()),
              HasSubstr("not reachable"));
  // The right socket without the offer's bytes: no descriptor, and the real worker still gets it.
  HandOverThread hand_over(created->get());
  other = offer;
  other.nonce[5] ^= 1;
  EXPECT_THAT(std::string(SharedRegion::Attach(other, kArea).status().message()),
              HasSubstr("no descriptor"));
  auto attached = SharedRegion::Attach(offer, kArea);
  EXPECT_TRUE(hand_over.Finish());
  EXPECT_TRUE(attached.ok()) << attached.status();
}

TEST(SharedRegion, AWorkerThatGoesOnWithoutAttachingEndsTheWait) {
  auto created = SharedRegion::Create(kArea);
  ASSERT_TRUE(created.ok()) << created.status();
  HandOverThread hand_over(created->get());
  EXPECT_FALSE(hand_over.Finish());
  EXPECT_FALSE(SharedRegion::Attach((*created)->offer(), kArea).ok());
}

TEST(SharedRegion, SizesOutsideTheBoundsAreRefused) {
  EXPECT_FALSE(SharedRegion::Create(0).ok());
  EXPECT_FALSE(SharedRegion::Create(SharedRegion::kMaxAreaBytes + 1).ok());
}

}  // namespace
}  // namespace strata
