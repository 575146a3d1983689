// The XC reader accepts valid files (plain and gzip) and rejects every malformed input with
// the file and line.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "common/error.h"
#include "data/dataset.h"
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

constexpr const char* kEmptyLine =
    ": empty line (every point needs a line; a point without labels or features is written as "
    "a single space)";

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
        // strtof alone would take hex and a blank after the colon.
        BadCase{"value_hex", "1 5 4\n1 1:0x10\n", "bad value in '1:0x10'", 2},
        BadCase{"value_after_blank", "2 5 4\n1 1:1\n1 1: 2\n", "bad value in '1:'", 3},
        BadCase{"value_inf", "1 5 4\n1 1:inf\n", "non-finite", 2},
        BadCase{"missing_colon", "1 5 4\n1 1\n", "bad feature", 2},
        BadCase{"dup_feature", "1 5 4\n1 1:1 1:2\n", "duplicate feature id 1", 2},
        BadCase{"dup_label", "1 5 4\n1,1 1:1\n", "duplicate label id 1", 2},
        BadCase{"bad_label", "1 5 4\n1,x 1:1\n", "bad label", 2},
        BadCase{"too_few", "3 5 4\n1 1:1\n2 2:1\n", "end of file after 2 points", 4},
        BadCase{"too_many", "1 5 4\n1 1:1\n2 2:1\n", "more points than the header", 3},
        BadCase{"empty", "", "empty file", 1},
        // An empty line is not a point (it was read as one without labels or features, so a
        // blank line could stand in for a lost point): a point without both is " ".
        BadCase{"empty_line_mid", "3 5 4\n1 1:1\n\n2 2:1\n", kEmptyLine, 3},
        BadCase{"empty_line_for_last_point", "2 5 4\n1 1:1\n\n", kEmptyLine, 3},
        BadCase{"empty_line_first_point", "1 5 4\n\n", kEmptyLine, 2},
        BadCase{"empty_line_crlf", "3 5 4\r\n1 1:1\r\n\r\n2 2:1\r\n", kEmptyLine, 3},
        BadCase{"empty_line_after_last_point", "1 5 4\n1 1:1\n\n", kEmptyLine, 3},
        BadCase{"bom",
                "\xEF\xBB\xBF"
                "1 5 4\n1 1:1\n",
                "starts with a UTF-8 byte-order mark; save the file without it", 1},
        BadCase{"bom_utf16",
                "\xFF\xFE"
                "1",
                "starts with a UTF-16 byte-order mark", 1},
        // Absurd counts are refused at the header, with the limit.
        BadCase{"header_huge_features", "1 1000000000000000 5\n1 1:1\n",
                "features must be in [1, 2^31 - 1 = 2147483647], got 1000000000000000", 1},
        BadCase{"header_huge_labels", "1 10 123456789012345678901234567890\n1 1:1\n",
                "labels must be in [1, 2^31 - 1 = 2147483647], got 123456789012345678901234567890",
                1},
        BadCase{"header_huge_points", "1000000000000000 10 5\n1 1:1\n",
                "1000000000000000 points is beyond the limit of 2^40 = 1099511627776 points", 1}),
    [](const auto& info) { return std::string(info.param.name); });

void ExpectSame(const Dataset& r, const Dataset& d);

TEST(Dataset, SingleSpaceIsAPointWithoutLabelsOrFeatures) {
  const auto p = WriteFile("empty_point.txt", "3 5 4\n \n\t\r\n1 1:1\n");
  const Dataset d = ReadXc(p);
  ASSERT_EQ(d.size(), 3);
  EXPECT_EQ(d.NumLabels(0), 0);
  EXPECT_EQ(d.Features(0).n, 0);
  EXPECT_EQ(d.NumLabels(1), 0);
  EXPECT_EQ(d.Features(1).n, 0);
}

TEST(Dataset, WriterWritesAnEmptyPointAsASpace) {
  Dataset d;
  d.num_features = 3;
  d.num_labels = 2;
  d.Add({}, {}, {});
  d.Add({}, {}, {1});
  d.Add({2}, {0.5f}, {});
  const std::string p = testing::TmpPath("empty_point_written.txt");
  WriteXc(d, p);
  std::ifstream in(p);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "3 3 2\n \n1\n 2:0.5\n");
  ExpectSame(ReadXc(p), d);
}

TEST(Dataset, StreamRejectsAnEmptyLineWithFileAndLine) {
  const auto p = WriteFile("stream_empty_line.txt", "3 5 4\n1 1:1\n\n2 2:1\n");
  DatasetStream in(p);
  Dataset chunk;
  ASSERT_TRUE(in.Next(1, &chunk));
  try {
    in.Next(1, &chunk);
    FAIL() << "empty line accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(p + ":3" + kEmptyLine), std::string::npos) << e.what();
  }
}

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

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(__SANITIZE_MEMORY__)
constexpr bool kSanitized = true;  // sanitizers reserve terabytes of address space
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

/// In a child process (a death test): limits the address space to what is mapped now plus
/// `extra` bytes, reads `path` and exits 0 printing the dslide::Error it raised (exit 1 when
/// the file loaded, 2 on anything else, a std::bad_alloc included).
[[noreturn]] void ReadUnderMemoryLimit(const std::string& path, int64_t extra) {
  long pages = 0;
  std::ifstream("/proc/self/statm") >> pages;
  const rlim_t limit = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) +
                       static_cast<rlim_t>(extra);
  struct rlimit rl = {limit, limit};
  if (setrlimit(RLIMIT_AS, &rl) != 0) std::_Exit(3);
  try {
    ReadXc(path);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::_Exit(0);
  } catch (...) {
    std::_Exit(2);
  }
  std::_Exit(1);
}

TEST(DatasetDeathTest, OutOfMemoryInTextIsAnErrorNamingFileLineAndPoints) {
  if (kSanitized) GTEST_SKIP() << "address-space limits do not work under sanitizers";
  // 2^22 points: about 100 MB as CSR arrays, read with 24 MB of address space to spare.
  const int64_t n = int64_t{1} << 22;
  const std::string p = testing::TmpPath("oom.txt");
  {
    std::string text = std::to_string(n) + " 10 5\n";
    for (int64_t i = 0; i < n; ++i) text += "1 3:1\n";
    std::ofstream(p) << text;
  }
  EXPECT_EXIT(ReadUnderMemoryLimit(p, int64_t{24} << 20), ::testing::ExitedWithCode(0),
              "oom\\.txt:[0-9]+: out of memory after reading [0-9]+ of the 4194304 points asked "
              "for \\(the points read hold [0-9]+ bytes");
}

TEST(DatasetDeathTest, OutOfMemoryInBinaryIsAnErrorNamingFileAndBytes) {
  if (kSanitized) GTEST_SKIP() << "address-space limits do not work under sanitizers";
  Dataset d;
  d.num_features = 10;
  d.num_labels = 5;
  const int64_t n = int64_t{1} << 22;
  d.feat_off.resize(n + 1);
  d.label_off.resize(n + 1);
  for (int64_t i = 0; i <= n; ++i) d.feat_off[i] = d.label_off[i] = i;
  d.feat_ids.assign(n, 3);
  d.feat_vals.assign(n, 1.0f);
  d.labels.assign(n, 1);
  const std::string p = testing::TmpPath("oom.dsb");
  WriteBinary(d, p);
  d = Dataset();
  EXPECT_EXIT(ReadUnderMemoryLimit(p, int64_t{24} << 20), ::testing::ExitedWithCode(0),
              "oom\\.dsb: out of memory: its 4194304 points need 117440528 bytes in memory");
}

TEST(Dataset, BinaryHeaderNotMatchingTheFileSizeIsRefusedBeforeAllocating) {
  const std::string p = testing::TmpPath("bigger_header.dsb");
  WriteBinary(Sample(), p);
  std::string bytes;
  {
    std::ifstream in(p, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  // Counts below the file's size, so not "corrupted header", but arrays that overrun it.
  const int64_t nnz = static_cast<int64_t>(bytes.size()) - 1;
  std::memcpy(&bytes[8 + 24], &nnz, 8);
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
  const std::string msg = ErrorOf(p);
  EXPECT_NE(msg.find(p + ": truncated binary dataset (the header's 3 points, " +
                     std::to_string(nnz) + " non-zeros"),
            std::string::npos)
      << msg;
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
