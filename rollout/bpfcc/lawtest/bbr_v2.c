#include "laws.h"
#define BBR_V 2
#include "bbr2_law.h"

#define PFX(x) law_bbr2_##x
#include "bbr_glue.inc"
