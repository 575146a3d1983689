// The XC reader accepts valid files (plain and gzip) and rejects every malformed input with
// the file and line.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <zlib.h>

#include "dataset.h"
#include "error.h"
#include "test_util.h"

namespace dslide {
namespace {

using testing::WriteFile;

std::string ErrorOf(const std::string& path) {
  try {
    ReadXc(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Dataset, ReadsValidFileWithUnlabelledPoint) {
  const auto p = WriteFile("ok.txt", "3 5 4\n0,2 1:0.5 3:2\n 0:1\n3 4:-1.5 2:1\n");
  const Dataset d = ReadXc(p);
  ASSERT_EQ(d.size(), 3);
  EXPECT_EQ(d.num_features, 5);
  EXPECT_EQ(d.num_labels, 4);
  EXPECT_EQ(d.NumLabels(0), 2);
  EXPECT_EQ(d.NumLabels(1), 0);
  EXPECT_EQ(d.Features(1).n, 1);
  // Unsorted features are sorted with their values.
  EXPECT_EQ(d.Features(2).ids[0], 2);
  EXPECT_FLOAT_EQ(d.Features(2).vals[1], -1.5f);
}

TEST(Dataset, ReadsGzip) {
  const std::string p = testing::TmpPath("ok.txt.gz");
  gzFile f = gzopen(p.c_str(), "wb");
  const std::string text = "2 3 3\n1 0:1\n0,2 2:0.25\n";
  gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
  const Dataset d = ReadXc(p);
  ASSERT_EQ(d.size(), 2);
  EXPECT_FLOAT_EQ(d.Features(1).vals[0], 0.25f);
}

struct BadCase {
  const char* name;
  const char* text;
  const char* expect;  // substring of the message, after "file:line"
  int line;
};

class DatasetBad : public ::testing::TestWithParam<BadCase> {};

TEST_P(DatasetBad, RejectedWithFileAndLine) {
  const BadCase& c = GetParam();
  const std::string p = WriteFile(std::string("bad_") + c.name + ".txt", c.text);
  const std::string msg = ErrorOf(p);
  ASSERT_FALSE(msg.empty()) << "accepted: " << c.name;
  EXPECT_NE(msg.find(p + ":" + std::to_string(c.line) + ":"), std::string::npos) << msg;
  EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(
    AllKinds, DatasetBad,
    ::testing::Values(
        BadCase{"header_words", "three 5 4\n", "bad header", 1},
        BadCase{"header_short", "3 5\n", "bad header", 1},
        BadCase{"header_zero_features", "1 0 4\n1 \n", "bad header", 1},
        BadCase{"label_range", "1 5 4\n4 1:1\n", "label 4 out of range", 2},
        BadCase{"feature_range", "2 5 4\n1 1:1\n1 5:1\n", "feature id 5 out of range", 3},
        BadCase{"value_text", "1 5 4\n1 1:abc\n", "bad value", 2},
        BadCase{"value_nan", "1 5 4\n1 1:nan\n", "non-finite", 2},
        BadCase{"value_inf", "1 5 4\n1 1:inf\n", "non-finite", 2},
        BadCase{"missing_colon", "1 5 4\n1 1\n", "bad feature", 2},
        BadCase{"dup_feature", "1 5 4\n1 1:1 1:2\n", "duplicate feature id 1", 2},
        BadCase{"dup_label", "1 5 4\n1,1 1:1\n", "duplicate label id 1", 2},
        BadCase{"bad_label", "1 5 4\n1,x 1:1\n", "bad label", 2},
        BadCase{"too_few", "3 5 4\n1 1:1\n2 2:1\n", "end of file after 2 points", 4},
        BadCase{"too_many", "1 5 4\n1 1:1\n2 2:1\n", "more points than the header", 3},
        BadCase{"empty", "", "empty file", 1}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Dataset, MissingFileNamed) {
  const std::string msg = ErrorOf("/nonexistent/dir/train.txt");
  EXPECT_NE(msg.find("/nonexistent/dir/train.txt"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
}

Dataset Sample() {
  Dataset d;
  d.num_features = 10;
  d.num_labels = 7;
  d.Add({1, 4, 9}, {0.5f, -2.0f, 3.25f}, {0, 6});
  d.Add({}, {}, {});
  d.Add({0}, {1.0f}, {3});
  return d;
}

/// Every field of two datasets is equal.
void ExpectSame(const Dataset& r, const Dataset& d) {
  EXPECT_EQ(r.num_features, d.num_features);
  EXPECT_EQ(r.num_labels, d.num_labels);
  EXPECT_EQ(r.feat_off, d.feat_off);
  EXPECT_EQ(r.feat_ids, d.feat_ids);
  EXPECT_EQ(r.feat_vals, d.feat_vals);
  EXPECT_EQ(r.label_off, d.label_off);
  EXPECT_EQ(r.labels, d.labels);
}

TEST(Dataset, WriteReadRoundTrip) {
  const Dataset d = Sample();
  const std::string p = testing::TmpPath("roundtrip.txt");
  WriteXc(d, p);
  ExpectSame(ReadXc(p), d);
}

TEST(Dataset, HugeHeaderCountIsAnErrorNotAnAllocation) {
  // Found by fuzz_xc_reader: the header's count was used to reserve memory up front.
  const std::string p = testing::WriteFile("huge_count.txt", "4000000000 10 5\n1 3:0.5\n");
  const std::string msg = ErrorOf(p);
  EXPECT_NE(msg.find("huge_count.txt:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the header says 4000000000"), std::string::npos) << msg;
}

TEST(Dataset, BinaryRoundTripIsDetectedByContent) {
  const Dataset d = Sample();
  const std::string p = testing::TmpPath("sample.dsb");
  WriteBinary(d, p);
  EXPECT_TRUE(IsBinaryDataset(p));
  ExpectSame(ReadXc(p), d);  // the same entry point as text
}

TEST(Dataset, DamagedBinaryIsRejectedNamingTheFile) {
  const std::string p = testing::TmpPath("damaged.dsb");
  WriteBinary(Sample(), p);
  std::string bytes;
  {
    std::ifstream in(p, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto check = [&](const std::string& content, const std::string& needle) {
    std::ofstream(p, std::ios::binary | std::ios::trunc) << content;
    const std::string msg = ErrorOf(p);
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  };
  std::string flipped = bytes;
  flipped[60] ^= 0x10;  // inside the arrays
  check(flipped, "checksum mismatch");
  check(bytes.substr(0, bytes.size() - 9), "truncated");
  check(bytes + "x", "trailing");
  std::string huge = bytes;
  const int64_t points = int64_t{1} << 40;
  std::memcpy(&huge[8], &points, 8);  // a header that would allocate terabytes
  check(huge, "corrupted header");
}

}  // namespace
}  // namespace dslide
