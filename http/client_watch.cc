#include "http/client_watch.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <string>

namespace autouvm::http {
namespace {

// An address as httplib writes a request's remote_addr / local_addr: numeric host, numeric port.
bool Numeric(const sockaddr_storage& addr, socklen_t len, std::string* host, int* port) {
  char h[NI_MAXHOST];
  char p[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, h, sizeof h, p, sizeof p,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return false;
  }
  *host = h;
  *port = std::atoi(p);
  return true;
}

bool IsConnection(int fd, const httplib::Request& request) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  sockaddr_storage addr;
  socklen_t len = sizeof addr;
  std::string host;
  int port = -1;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 || !Numeric(addr, len, &host, &port) ||
      port != request.remote_port || host != request.remote_addr) {
    return false;
  }
  len = sizeof addr;
  return getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 && Numeric(addr, len, &host, &port) &&
         port == request.local_port && host == request.local_addr;
}

// The socket of the request's connection among this process' open files; -1 if none is.
int FindConnection(const httplib::Request& request) {
  if (request.remote_port <= 0 || request.local_port <= 0) return -1;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  const int own = dirfd(dir);
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == own) continue;
    if (IsConnection(static_cast<int>(fd), request)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

}  // namespace

ClientWatch::ClientWatch(const httplib::Request& request) {
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
  if (request.ssl != nullptr) {
    fd_ = SSL_get_fd(request.ssl);
    return;
  }
#endif
  fd_ = FindConnection(request);
}

bool ClientWatch::gone() const {
  if (fd_ < 0) return false;
  pollfd p{.fd = fd_, .events = POLLRDHUP, .revents = 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace autouvm::http
