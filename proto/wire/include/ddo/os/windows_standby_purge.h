// File: proto/wire/include/ddo/os/windows_standby_purge.h
//
// The standby-list purge the seed's runners ask for between phases (docs/windows.md): Windows
// keeps pages of files read earlier on its standby list, and a pipeline that reads 30 GiB of
// weights fills it; purging frees that memory for the next component at once. The call
// (NtSetSystemInformation with SystemMemoryListInformation and MemoryPurgeStandbyList) needs
// SeProfileSingleProcessPrivilege, which an administrator's token or a service account granted
// it holds: run in ddod as a service, every runner's purge works without an administrator
// terminal.
//
// Thread-safety: any thread.
#ifndef DDO_OS_WINDOWS_STANDBY_PURGE_H_
#define DDO_OS_WINDOWS_STANDBY_PURGE_H_

#ifdef _WIN32

#include "absl/status/status.h"

namespace ddo::os {

// Enables the privilege in this process's token and purges the standby list.
// PermissionDenied when the token lacks the privilege (naming it); Unimplemented when the
// system does not implement the call; Internal with the NTSTATUS in hex otherwise.
absl::Status PurgeStandbyList();

}  // namespace ddo::os

#endif  // _WIN32

#endif  // DDO_OS_WINDOWS_STANDBY_PURGE_H_
