#include "ddo/os/user_ids.h"

namespace ddo::os {

UserIds CurrentUserIds() { return UserIds{0, 0}; }

}  // namespace ddo::os
