#include "ddo/os/user_ids.h"

#include <unistd.h>

namespace ddo::os {

UserIds CurrentUserIds() { return UserIds{::geteuid(), ::getegid()}; }

}  // namespace ddo::os
