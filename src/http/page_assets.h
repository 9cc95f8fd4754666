// The operator's page (src/http/page/), compiled into the binary by cmake/EmbedAssets.cmake, so
// that tollgated serves it with no file, CDN or build step beyond cmake.
#ifndef TOLLGATE_SRC_HTTP_PAGE_ASSETS_H_
#define TOLLGATE_SRC_HTTP_PAGE_ASSETS_H_

#include <span>
#include <string_view>

namespace tollgate::http {

struct PageAsset {
  std::string_view path;          // "/", "/ui/app.js", ...
  std::string_view content_type;  // with its charset
  std::string_view bytes;
};

std::span<const PageAsset> page_assets();

}  // namespace tollgate::http

#endif  // TOLLGATE_SRC_HTTP_PAGE_ASSETS_H_
