// Replays inputs through a fuzz target's LLVMFuzzerTestOneInput without libFuzzer, so the
// normal (gcc) build and the ASan build run every seed and every recorded crasher as a test.
//
// Usage: fuzz_<target>_replay PATH...   (a PATH is a file, or a directory whose files are run in
// name order; names starting with '.' are skipped, a missing directory counts as empty).
// Exits 0 when every input ran, 1 when no input was found at all (a wrong path must not pass
// silently). A broken contract aborts, naming the input just announced on stdout.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace fs = std::filesystem;

namespace {

bool run_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return false;
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::printf("replay %s (%zu bytes)\n", path.c_str(), bytes.size());
  std::fflush(stdout);
  // A copy of exactly the input's size, so ASan sees a read past its end.
  std::vector<uint8_t> data(bytes.begin(), bytes.end());
  static uint8_t empty = 0;  // libFuzzer never passes a null pointer, even for no bytes
  LLVMFuzzerTestOneInput(data.empty() ? &empty : data.data(), data.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  size_t ran = 0;
  bool ok = true;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg(argv[i]);
    std::error_code ec;
    if (fs::is_directory(arg, ec)) {
      std::vector<fs::path> files;
      for (const fs::directory_entry& e : fs::directory_iterator(arg)) {
        if (e.is_regular_file() && e.path().filename().string().front() != '.') files.push_back(e.path());
      }
      std::sort(files.begin(), files.end());
      for (const fs::path& f : files) {
        ok = run_file(f) && ok;
        ++ran;
      }
    } else if (fs::exists(arg, ec)) {
      ok = run_file(arg) && ok;
      ++ran;
    }
  }
  std::printf("%zu inputs replayed\n", ran);
  if (ran == 0) {
    std::fprintf(stderr, "no inputs found: check the corpus paths\n");
    return 1;
  }
  return ok ? 0 : 1;
}
