#include "laws.h"
#define BBR_V 3
#include "bbr2_law.h"

#define PFX(x) law_bbr3_##x
#include "bbr_glue.inc"
