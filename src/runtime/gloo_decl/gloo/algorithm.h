// See ../README.md: ProcessGroupGloo.hpp includes this; nothing from it is used.
#pragma once
