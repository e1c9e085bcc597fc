// The shared region of the push/pull data plane (services/common/wire/shared_region.h): what one
// side writes the other reads; an offer that names anything but the region it was made for is
// refused (another size, other first bytes, a file that is not sealed); and nobody who opens the
// region can shrink it under the other side.
#include "services/common/wire/shared_region.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strata {
namespace {

using ::testing::HasSubstr;

constexpr size_t kArea = 10000;  // not a whole number of pages

TEST(SharedRegion, WhatOneSideWritesTheOtherReads) {
  auto created = SharedRegion::Create(kArea);
  ASSERT_TRUE(created.ok()) << created.status();
  const SharedRegion& server = **created;
  EXPECT_EQ(server.offer().pid, static_cast<uint32_t>(getpid()));
  EXPECT_EQ(server.offer().region_bytes, SharedRegion::RegionBytes(kArea));
  EXPECT_EQ(server.reply_area() - server.push_area(),
            static_cast<ptrdiff_t>(SharedRegion::AreaSpan(kArea)));

  auto attached = SharedRegion::Attach(server.offer(), kArea);
  ASSERT_TRUE(attached.ok()) << attached.status();
  const SharedRegion& worker = **attached;
  ASSERT_NE(worker.push_area(), server.push_area()) << "a mapping of its own";
  for (size_t i = 0; i < kArea; ++i) worker.push_area()[i] = static_cast<uint8_t>(i * 31);
  for (size_t i = 0; i < kArea; ++i) server.reply_area()[i] = static_cast<uint8_t>(i * 7 + 3);
  for (size_t i = 0; i < kArea; ++i) {
    ASSERT_EQ(server.push_area()[i], static_cast<uint8_t>(i * 31)) << i;
    ASSERT_EQ(worker.reply_area()[i], static_cast<uint8_t>(i * 7 + 3)) << i;
  }
}

TEST(SharedRegion, AnOfferForAnotherRegionIsRefused) {
  auto created = SharedRegion::Create(kArea);
  ASSERT_TRUE(created.ok()) << created.status();
  const SharedRegionOffer offer = (*created)->offer();

  // The worker expects another partition size.
  EXPECT_THAT(std::string(SharedRegion::Attach(offer, kArea * 2).status().message()),
              HasSubstr("expected"));
  // Other first bytes: what another process's descriptor with that number would hold.
  SharedRegionOffer other = offer;
  other.nonce[5] ^= 1;
  EXPECT_THAT(std::string(SharedRegion::Attach(other, kArea).status().message()),
              HasSubstr("another process's file"));
  // A descriptor that is not there (a pid namespace where the number means nothing).
  other = offer;
  other.fd = 1 << 20;
  EXPECT_THAT(std::string(SharedRegion::Attach(other, kArea).status().message()),
              HasSubstr("opening /proc/"));
  // An ordinary file of the right size and first bytes, but not sealed: refused.
  char path[] = "/tmp/strata-shared-region-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  unlink(path);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(offer.region_bytes)), 0);
  ASSERT_EQ(pwrite(fd, offer.nonce.data(), offer.nonce.size(), 0),
            static_cast<ssize_t>(offer.nonce.size()));
  other = offer;
  other.fd = static_cast<uint32_t>(fd);
  EXPECT_THAT(std::string(SharedRegion::Attach(other, kArea).status().message()),
              HasSubstr("not sealed"));
  // A descriptor that is not a regular file.
  other.fd = static_cast<uint32_t>(STDIN_FILENO);
  EXPECT_FALSE(SharedRegion::Attach(other, kArea).ok());
  close(fd);
}

TEST(SharedRegion, NobodyWhoOpensItCanShrinkIt) {
  auto created = SharedRegion::Create(kArea);
  ASSERT_TRUE(created.ok()) << created.status();
  const SharedRegionOffer& offer = (*created)->offer();
  const std::string path = "/proc/" + std::to_string(offer.pid) + "/fd/" + std::to_string(offer.fd);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_NE(ftruncate(fd, 0), 0) << "shrinking would make the server's accesses fault";
  EXPECT_NE(ftruncate(fd, static_cast<off_t>(offer.region_bytes) * 2), 0);
  close(fd);
  // Still whole: the last byte of the reply area is there.
  (*created)->reply_area()[kArea - 1] = 1;
}

TEST(SharedRegion, SizesOutsideTheBoundsAreRefused) {
  EXPECT_FALSE(SharedRegion::Create(0).ok());
  EXPECT_FALSE(SharedRegion::Create(SharedRegion::kMaxAreaBytes + 1).ok());
}

}  // namespace
}  // namespace strata
