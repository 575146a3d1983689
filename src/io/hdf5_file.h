// HDF5 files of checkpoints (C API), for the io library's own files: handles, typed arrays,
// attributes and strings, and the sidecar checksum that is verified before HDF5 parses a
// file. Every call is checked; failures become dslide::Error (DamagedCheckpoint where a file
// is there but cannot be trusted) naming the file and what was being read or written.
#pragma once

#include <hdf5.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/checksum.h"
#include "common/error.h"
#include "io/checkpoint.h"

namespace dslide::h5 {

/// Owns an HDF5 handle; closes it with the matching function.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }
  /// Closes now; false when closing failed (for a file: its last writes did not reach the disk).
  bool Close() {
    const hid_t id = id_;
    id_ = -1;
    return id < 0 || close_(id) >= 0;
  }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

/// Throws DamagedCheckpoint (a checkpoint that is there but cannot be trusted).
#define DAMAGED_CHECK(cond, ...)                                                           \
  do {                                                                                     \
    if (!(cond)) throw ::dslide::DamagedCheckpoint(::dslide::detail::Concat(__VA_ARGS__)); \
  } while (0)

inline void QuietHdf5() {
  static const bool once = [] {
    // A file whose close failed (a full disk) stays in the library's tables, and the
    // library's exit handler then crashes closing it again: files are always closed by
    // their Handle here, so the exit handler is not needed.
    H5dont_atexit();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)once;
}

template <class T>
hid_t Type();
template <>
inline hid_t Type<float>() {
  return H5T_NATIVE_FLOAT;
}
template <>
inline hid_t Type<double>() {
  return H5T_NATIVE_DOUBLE;
}
template <>
inline hid_t Type<int32_t>() {
  return H5T_NATIVE_INT32;
}
template <>
inline hid_t Type<uint32_t>() {
  return H5T_NATIVE_UINT32;
}
template <>
inline hid_t Type<int64_t>() {
  return H5T_NATIVE_INT64;
}
template <>
inline hid_t Type<uint64_t>() {
  return H5T_NATIVE_UINT64;
}
template <>
inline hid_t Type<uint16_t>() {
  return H5T_NATIVE_UINT16;
}

/// HDF5's description of bfloat16 (the top half of an IEEE single: sign, 8 exponent bits
/// biased by 127, 7 mantissa bits): stored as such, it reads into floats (H5T_NATIVE_FLOAT)
/// exactly, by HDF5's own conversion, in any reader that reads the dataset as floats.
inline Handle Bf16Type() {
  Handle t(H5Tcopy(H5T_IEEE_F32LE), H5Tclose);
  const bool ok = H5Tset_fields(t.get(), 15, 7, 8, 0, 7) >= 0 && H5Tset_offset(t.get(), 0) >= 0 &&
                  H5Tset_precision(t.get(), 16) >= 0 && H5Tset_size(t.get(), 2) >= 0 &&
                  H5Tset_ebias(t.get(), 127) >= 0;
  DSLIDE_CHECK(ok && t.ok(), "HDF5 refused the bfloat16 type");
  return t;
}

/// A 1-D (cols == 0) or 2-D dataset, chunked with Fletcher-32 checksums. `type`: the
/// element type in memory and in the file (default: T's).
template <class T>
void WriteArray(hid_t loc, const std::string& file, const std::string& name, const T* data,
                hsize_t rows, hsize_t cols = 0, hid_t type = Type<T>()) {
  const int rank = cols ? 2 : 1;
  const hsize_t dims[2] = {rows, cols};
  Handle space(H5Screate_simple(rank, dims, nullptr), H5Sclose);
  Handle plist(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (rows > 0) {
    const hsize_t per_row = cols ? cols : 1;
    const hsize_t chunk_rows =
        std::max<hsize_t>(1, std::min<hsize_t>(rows, (hsize_t{1} << 20) / per_row));
    const hsize_t chunk[2] = {chunk_rows, cols};
    H5Pset_chunk(plist.get(), rank, chunk);
    H5Pset_fletcher32(plist.get());
  }
  errno = 0;
  Handle ds(H5Dcreate2(loc, name.c_str(), type, space.get(), H5P_DEFAULT, plist.get(), H5P_DEFAULT),
            H5Dclose);
  DSLIDE_CHECK(
      ds.ok() && (rows == 0 || H5Dwrite(ds.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0),
      file, ": cannot write dataset '", name, "'", OsReason(errno));
}

template <class T>
void WriteVector(hid_t loc, const std::string& file, const std::string& name,
                 const std::vector<T>& v) {
  WriteArray(loc, file, name, v.data(), v.size());
}

/// Whether dataset `name` holds bfloat16 as Bf16Type describes it (another 2-byte float,
/// IEEE half say, is not: HDF5 converts that one to floats itself).
inline bool HoldsBf16(hid_t loc, const std::string& name) {
  Handle ds(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) return false;
  Handle t(H5Dget_type(ds.get()), H5Tclose);
  const Handle bf16 = Bf16Type();
  return H5Tequal(t.get(), bf16.get()) > 0;
}

/// Rows [row0, row0 + rows) of a dataset (all of it when rows < 0) into out. `type`: the
/// element type in memory (default: T's; HDF5 converts the file's to it).
template <class T>
void ReadRows(hid_t loc, const std::string& file, const std::string& name, int64_t row0,
              int64_t rows, std::vector<T>* out, int64_t* cols_out = nullptr,
              hid_t type = Type<T>()) {
  Handle ds(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose);
  DAMAGED_CHECK(ds.ok(), file, ": dataset '", name, "' is missing");
  Handle space(H5Dget_space(ds.get()), H5Sclose);
  hsize_t dims[2] = {0, 0};
  const int rank = H5Sget_simple_extent_ndims(space.get());
  DAMAGED_CHECK(rank == 1 || rank == 2, file, ": dataset '", name, "' has ", rank, " dimensions");
  H5Sget_simple_extent_dims(space.get(), dims, nullptr);
  const hsize_t cols = rank == 2 ? dims[1] : 1;
  if (cols_out) *cols_out = static_cast<int64_t>(cols);
  if (rows < 0) {
    row0 = 0;
    rows = static_cast<int64_t>(dims[0]);
  }
  DAMAGED_CHECK(row0 >= 0 && static_cast<hsize_t>(row0 + rows) <= dims[0], file, ": dataset '",
                name, "' has ", dims[0], " rows, rows ", row0, "..", row0 + rows,
                " were asked for");
  out->resize(static_cast<size_t>(rows) * cols);
  if (rows == 0) return;
  const hsize_t start[2] = {static_cast<hsize_t>(row0), 0},
                count[2] = {static_cast<hsize_t>(rows), cols};
  H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr);
  Handle mem(H5Screate_simple(rank, count, nullptr), H5Sclose);
  DAMAGED_CHECK(H5Dread(ds.get(), type, mem.get(), space.get(), H5P_DEFAULT, out->data()) >= 0,
                file, ": dataset '", name,
                "' is unreadable (truncated or corrupted: checksum or I/O error)");
}

template <class T>
void WriteAttr(hid_t loc, const std::string& file, const char* name, T value) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle a(H5Acreate2(loc, name, Type<T>(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  DSLIDE_CHECK(a.ok() && H5Awrite(a.get(), Type<T>(), &value) >= 0, file,
               ": cannot write attribute '", name, "'");
}

template <class T>
T ReadAttr(hid_t loc, const std::string& file, const char* name) {
  Handle a(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose);
  T value{};
  DAMAGED_CHECK(a.ok() && H5Aread(a.get(), Type<T>(), &value) >= 0, file, ": attribute '", name,
                "' is missing or unreadable");
  return value;
}

inline void WriteString(hid_t loc, const std::string& file, const char* name,
                        const std::string& s) {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), std::max<size_t>(1, s.size()));
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle a(H5Acreate2(loc, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  const std::string padded = s.empty() ? std::string(1, '\0') : s;
  DSLIDE_CHECK(a.ok() && H5Awrite(a.get(), type.get(), padded.data()) >= 0, file,
               ": cannot write attribute '", name, "'");
}

inline std::string ReadString(hid_t loc, const std::string& file, const char* name) {
  Handle a(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose);
  DAMAGED_CHECK(a.ok(), file, ": attribute '", name, "' is missing");
  Handle type(H5Aget_type(a.get()), H5Tclose);
  const size_t n = H5Tget_size(type.get());
  DAMAGED_CHECK(H5Tget_class(type.get()) == H5T_STRING && n > 0 && n < (1 << 20), file,
                ": attribute '", name, "' is not a string");
  std::string s(n, '\0');
  Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(mem.get(), n);
  DAMAGED_CHECK(H5Aread(a.get(), mem.get(), s.data()) >= 0, file, ": attribute '", name,
                "' is unreadable");
  s.resize(std::strlen(s.c_str()));
  return s;
}

/// Sidecar FILE.sum: "<size> <checksum hex>" of a finished checkpoint file. Verified before
/// HDF5 parses the file, so a damaged file never reaches the library.
inline void WriteSidecar(const std::string& file) {
  const FileSum s = SumFile(file);
  errno = 0;
  FILE* f = std::fopen((file + ".sum").c_str(), "w");
  DSLIDE_CHECK(f != nullptr, file, ".sum: cannot write", OsReason(errno));
  const bool written = std::fprintf(f, "%lld %016llx\n", static_cast<long long>(s.size),
                                    static_cast<unsigned long long>(s.sum)) > 0;
  const bool flushed = std::fflush(f) == 0;
  const int err = errno;
  const bool closed = std::fclose(f) == 0;
  DSLIDE_CHECK(written && flushed && closed, file, ".sum: write failed",
               OsReason(err ? err : errno));
}

inline void VerifySidecar(const std::string& file) {
  long long size = -1;
  unsigned long long sum = 0;
  {
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen((file + ".sum").c_str(), "r"), &std::fclose);
    DAMAGED_CHECK(f != nullptr, file, ".sum: checksum file is missing (an unfinished checkpoint?)");
    DAMAGED_CHECK(std::fscanf(f.get(), "%lld %llx", &size, &sum) == 2 && size >= 0, file,
                  ".sum: malformed checksum file");
  }
  const FileSum s = SumFile(file);
  DAMAGED_CHECK(s.size == size, file, ": ", s.size, " bytes, ", size,
                " were written (truncated or corrupted)");
  DAMAGED_CHECK(s.sum == sum, file, ": checksum mismatch (corrupted)");
}

inline Handle OpenFile(const std::string& file) {
  QuietHdf5();
  DAMAGED_CHECK(std::filesystem::exists(file), file, ": checkpoint file is missing");
  VerifySidecar(file);
  Handle f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  DAMAGED_CHECK(f.ok(), file, ": not a readable HDF5 checkpoint (truncated or corrupted)");
  return f;
}

/// A file without a checksum sidecar (a serving model travels as one file): its values are
/// checked as they are read instead.
inline Handle OpenUnsummedFile(const std::string& file) {
  QuietHdf5();
  DAMAGED_CHECK(std::filesystem::exists(file), file, ": the file is missing");
  Handle f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  DAMAGED_CHECK(f.ok(), file, ": not a readable HDF5 file (truncated or corrupted)");
  return f;
}

inline Handle CreateFile(const std::string& file) {
  QuietHdf5();
  errno = 0;
  Handle f(H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  DSLIDE_CHECK(f.ok(), file, ": cannot create the file", OsReason(errno));
  return f;
}

}  // namespace dslide::h5
