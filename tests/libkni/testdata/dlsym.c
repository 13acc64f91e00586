/* SPDX-License-Identifier: BSD-3-Clause
 *
 * dlsym: what LuaJIT's ffi.load("rte_kni") (libmoon) and Rust's libloading
 * do: dlopen("librte_kni.so"), then look each function up by name. Each
 * argument is NAME@VERSION; prints one line per name, "NAME found
 * versioned" when dlsym finds it and dlvsym finds the same address under
 * VERSION (what a binary linked against DPDK's own librte_kni binds to).
 * Exit 1 when the library does not load.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int
main(int argc, char **argv)
{
	void *h = dlopen("librte_kni.so", RTLD_NOW | RTLD_LOCAL);
	int i;

	if (h == NULL) {
		printf("dlopen: %s\n", dlerror());
		return 1;
	}
	for (i = 1; i < argc; i++) {
		char name[128], *at;
		void *p, *v;

		snprintf(name, sizeof(name), "%s", argv[i]);
		at = strchr(name, '@');
		if (at != NULL)
			*at++ = '\0';
		p = dlsym(h, name);
		v = at != NULL ? dlvsym(h, name, at) : NULL;
		printf("%s %s %s\n", name, p != NULL ? "found" : "missing",
		       p != NULL && v == p ? "versioned" : "unversioned");
	}
	return 0;
}
