#include "laws.h"
unsigned law_bbr2_state_size(void);
unsigned law_bbr3_state_size(void);
void law_bbr2_on_ack(void *, const struct law_bbr_in *, struct law_bbr_view *);
void law_bbr3_on_ack(void *, const struct law_bbr_in *, struct law_bbr_view *);
void law_bbr2_on_loss_state(void *, u32);
void law_bbr3_on_loss_state(void *, u32);
void law_bbr2_on_undo(void *);
void law_bbr3_on_undo(void *);

unsigned law_bbr_state_size(void)
{
	unsigned a = law_bbr2_state_size(), b = law_bbr3_state_size();
	return a > b ? a : b;
}
void law_bbr_on_ack(int version, void *s, const struct law_bbr_in *in, struct law_bbr_view *out)
{
	if (version == 3)
		law_bbr3_on_ack(s, in, out);
	else
		law_bbr2_on_ack(s, in, out);
}
void law_bbr_on_loss_state(int version, void *s, u32 cwnd)
{
	if (version == 3)
		law_bbr3_on_loss_state(s, cwnd);
	else
		law_bbr2_on_loss_state(s, cwnd);
}
void law_bbr_on_undo(int version, void *s)
{
	if (version == 3)
		law_bbr3_on_undo(s);
	else
		law_bbr2_on_undo(s);
}

/* UBSan: stop at the first undefined operation (a division by zero, a signed overflow, a shift
 * out of range), so that the Go test fails instead of printing and going on */
const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void) { return "halt_on_error=1:print_stacktrace=1"; }
