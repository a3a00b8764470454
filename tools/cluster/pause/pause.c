/*
 * The cluster's sandbox ("pause") program: PID 1 of every pod sandbox, and the init of every
 * node. It holds its namespaces open, reaps the children that are handed to it, and exits
 * cleanly on SIGINT or SIGTERM.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig)
{
	(void)sig;
	_exit(0);
}

static void on_child(int sig)
{
	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

int main(int argc, char **argv)
{
	struct sigaction stop, child;

	if (argc > 1 && strcmp(argv[1], "-v") == 0) {
		puts("csi-hostpath pause");
		return 0;
	}
	memset(&stop, 0, sizeof(stop));
	stop.sa_handler = on_stop;
	sigaction(SIGINT, &stop, NULL);
	sigaction(SIGTERM, &stop, NULL);
	memset(&child, 0, sizeof(child));
	child.sa_handler = on_child;
	child.sa_flags = SA_NOCLDSTOP | SA_RESTART;
	sigaction(SIGCHLD, &child, NULL);
	for (;;)
		pause();
}
