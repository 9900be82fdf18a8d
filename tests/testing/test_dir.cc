#include "tests/testing/test_dir.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <system_error>

#include "gtest/gtest.h"

namespace fuseserve {

namespace fs = std::filesystem;

TestDir::TestDir(std::string_view prefix) {
  std::string pattern =
      (fs::path(::testing::TempDir()) / (std::string(prefix) + ".XXXXXX")).string();
  const char* created = ::mkdtemp(pattern.data());
  EXPECT_NE(created, nullptr) << "mkdtemp " << pattern;
  path_ = pattern;
}

TestDir::~TestDir() {
  std::error_code error;
  fs::remove_all(path_, error);
}

std::string TestDir::Path(const std::string& relative) const {
  return (fs::path(path_) / relative).string();
}

std::string TestDir::MakeDir(const std::string& relative) const {
  const std::string path = Path(relative);
  std::error_code error;
  fs::create_directories(path, error);
  EXPECT_FALSE(error) << "create_directories " << path << ": " << error.message();
  return path;
}

std::string TestDir::WriteFile(const std::string& relative, const std::string& contents) const {
  const std::string path = Path(relative);
  std::error_code error;
  fs::create_directories(fs::path(path).parent_path(), error);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  out.close();
  EXPECT_TRUE(out.good()) << "write " << path;
  return path;
}

}  // namespace fuseserve
