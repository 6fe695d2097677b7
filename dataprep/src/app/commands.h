/* commands.h - the subcommands of qtrain-data (main.c dispatches): each takes the
 * arguments after its name, prints its output, and returns 0 or -1 with qtd_fail's message
 * set (nothing left under an output's name on failure). */
#ifndef QTD_COMMANDS_H
#define QTD_COMMANDS_H

int qtd_cmd_encode(int argc, char **argv);
int qtd_cmd_decode(int argc, char **argv);
int qtd_cmd_info(int argc, char **argv);

#endif
