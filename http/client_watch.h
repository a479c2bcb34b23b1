// Whether the client of one HTTP request is still connected, asked by the handler that serves it.
//
//   ClientWatch watch(request);           // on the handler's thread, which holds the connection
//   if (watch.gone()) exchange->CancelAll();
//
// Note [Seeing a client go]: Debian 12's cpp-httplib (0.11) tells a handler nothing of its connection:
// DataSink::is_writable() is a select() for writing, which a socket whose peer has closed still passes,
// so a disconnect was seen only when a write failed — the second write after the close, since the first
// one draws the peer's reset — and a request answered whole never saw it. The handler's thread holds the
// connection's socket while it runs (the stream's content provider runs on it too, before the socket is
// closed), so the watch finds that socket once per request: through the TLS session where there is one,
// else as the socket whose own and peer addresses are the request's (they name one TCP connection). It
// then polls it for POLLRDHUP, which the kernel sets when the peer's FIN arrives even with unread bytes
// before it (a pipelined request, TLS's close_notify), and for a reset or an error.
#pragma once

#include <httplib.h>

namespace autouvm::http {

class ClientWatch {
 public:
  explicit ClientWatch(const httplib::Request& request);

  // The client closed its side of the connection, or the connection failed. False when the socket was
  // not found (found() says so): then only a failed write shows a disconnect, as before.
  bool gone() const;
  bool found() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace autouvm::http
