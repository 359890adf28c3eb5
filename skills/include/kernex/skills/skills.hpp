// Umbrella header for the skills library.
#pragma once

#include "kernex/skills/activation.hpp"
#include "kernex/skills/checks.hpp"
#include "kernex/skills/lint.hpp"
#include "kernex/skills/loader.hpp"
#include "kernex/skills/lock.hpp"
#include "kernex/skills/project.hpp"
#include "kernex/skills/skill.hpp"
