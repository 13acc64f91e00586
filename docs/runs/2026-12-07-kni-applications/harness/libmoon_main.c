/* libmoon's model in small: an executable linked with -rdynamic that runs
 * LuaJIT inside, whose Lua code calls C through ffi.C (libmoon's src/main.c
 * and lua/kni.lua). Runs the Lua file argv[1] with the remaining arguments
 * in `arg`. No EAL: only the symbol lookups are checked. */
#include <stdio.h>
#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE.lua [ARG...]\n", argv[0]);
		return 2;
	}
	lua_State *L = luaL_newstate();
	luaL_openlibs(L);
	lua_newtable(L);
	for (int i = 2; i < argc; i++) {
		lua_pushstring(L, argv[i]);
		lua_rawseti(L, -2, i - 1);
	}
	lua_setglobal(L, "arg");
	if (luaL_dofile(L, argv[1]) != 0) {
		fprintf(stderr, "%s\n", lua_tostring(L, -1));
		return 1;
	}
	return 0;
}
