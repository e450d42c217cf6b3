// File: daemon/identity/segment_grant.h
//
// One segment a caller may have ddod open for it (OPEN on the identity socket), and whether
// read-write. A segment is a shared-memory segment of the pool (opened by name), or a
// component's backing file (kind kFile): ddod holds a read-only descriptor of that file, and
// OPEN answers a duplicate of it, never read-write; or the write end of a pipe of a streamed
// upload (kind kPipe, store/upload_pipes.h), served once, write-only. The layers that own the segments say
// which ones an answer grants (store/segment_grants.h for components and uploads,
// stream/session_grants.h for a streaming session's); the service hands the list to
// CallerRegistry::Grant with the caller's token.
//
// Thread-safety: a value type; the descriptor it may share is never written through.
#ifndef DDO_DAEMON_IDENTITY_SEGMENT_GRANT_H_
#define DDO_DAEMON_IDENTITY_SEGMENT_GRANT_H_

#include <memory>
#include <string>
#include <utility>

#include "ddo/wire/unique_fd.h"

namespace ddo {

enum class SegmentKind {
  kShm,   // a POSIX shared-memory segment, opened by name
  kFile,  // a backing file, served from `file`
  kPipe,  // a streamed upload's pipe: its write end, in `file`, served once
};

struct SegmentGrant {
  SegmentGrant() = default;
  // A shared-memory segment.
  SegmentGrant(std::string name, bool read_write)
      : shm_name(std::move(name)), writable(read_write) {}
  // A backing file, served read-only from `descriptor`.
  static SegmentGrant File(std::string name, std::shared_ptr<const UniqueFd> descriptor) {
    SegmentGrant grant(std::move(name), /*read_write=*/false);
    grant.kind = SegmentKind::kFile;
    grant.file = std::move(descriptor);
    return grant;
  }

  // A streamed upload's pipe, whose write end `descriptor` is served once (OPEN ... rw).
  static SegmentGrant Pipe(std::string name, std::shared_ptr<const UniqueFd> descriptor) {
    SegmentGrant grant(std::move(name), /*read_write=*/true);
    grant.kind = SegmentKind::kPipe;
    grant.file = std::move(descriptor);
    return grant;
  }

  std::string shm_name;  // the name the caller OPENs (for kFile and kPipe, one ddod made up)
  bool writable = false;  // never true for kFile, always for kPipe
  SegmentKind kind = SegmentKind::kShm;
  // kFile: the read-only descriptor OPEN duplicates; shared with its owner (the component's
  // backing files), so the grant keeps the file open no longer than the caller's connection.
  // kPipe: the pipe's write end, held by the grant alone.
  std::shared_ptr<const UniqueFd> file;
};

}  // namespace ddo

#endif  // DDO_DAEMON_IDENTITY_SEGMENT_GRANT_H_
