#pragma once

// A fresh directory under ::testing::TempDir(), named <prefix>.XXXXXX,
// removed (with everything in it) when the object goes out of scope: the
// scratch directory of every test that writes files (repositories, configs,
// traces).

#include <string>
#include <string_view>

namespace fuseserve {

class TestDir {
 public:
  explicit TestDir(std::string_view prefix = "fuseserve-test");
  ~TestDir();
  TestDir(const TestDir&) = delete;
  TestDir& operator=(const TestDir&) = delete;

  const std::string& path() const { return path_; }

  // <path()>/<relative>.
  std::string Path(const std::string& relative) const;

  // Creates <path()>/<relative> and its parents; returns its path.
  std::string MakeDir(const std::string& relative) const;

  // Writes `contents` to <path()>/<relative>, creating parent directories;
  // returns its path.
  std::string WriteFile(const std::string& relative, const std::string& contents) const;

 private:
  std::string path_;
};

}  // namespace fuseserve
