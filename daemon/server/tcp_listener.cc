#include "daemon/server/tcp_listener.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ddo/wire/display_text.h"

namespace ddo {

absl::StatusOr<TcpListener> ListenOnTcp(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  int port_number = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(host_port.substr(colon + 1), &port_number) || port_number < 0 ||
      port_number > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen: '", EscapeForDisplay(host_port), "' is not HOST:PORT (e.g. 127.0.0.1:50051)"));
  }
  std::string host = host_port.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(port_number);
  if (const int error = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); error != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--listen: cannot resolve '",
                                                   EscapeForDisplay(host), "': ",
                                                   ::gai_strerror(error)));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, &::freeaddrinfo);
  int last_error = EADDRNOTAVAIL;
  for (const addrinfo* address = found; address != nullptr; address = address->ai_next) {
    UniqueFd fd(::socket(address->ai_family, address->ai_socktype | SOCK_CLOEXEC,
                         address->ai_protocol));
    if (!fd.valid()) {
      last_error = errno;
      continue;
    }
    const int one = 1;
    (void)::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), address->ai_addr, address->ai_addrlen) != 0 ||
        ::listen(fd.get(), SOMAXCONN) != 0) {
      last_error = errno;
      continue;
    }
    sockaddr_storage bound{};
    socklen_t length = sizeof(bound);
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
      last_error = errno;
      continue;
    }
    const int chosen = bound.ss_family == AF_INET6
                           ? ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port)
                           : ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
    return TcpListener{std::move(fd), chosen};
  }
  return absl::UnavailableError(absl::StrCat("could not listen on ", EscapeForDisplay(host_port),
                                             ": ", std::strerror(last_error),
                                             " (is the TCP port in use?)"));
}

}  // namespace ddo
