-- The calls libmoon's lua/kni.lua makes through ffi.C, looked up by name the
-- way LuaJIT's FFI does (dlsym): in the library named by arg[1] (built from
-- libmoon's src/kni.c), or with arg[1] "C" in the running executable, as
-- libmoon's own (-rdynamic, LuaJIT inside) does.
local ffi = require("ffi")
ffi.cdef[[
struct rte_kni; struct rte_mbuf;
struct rte_kni * mg_create_kni(uint8_t port_id, uint8_t core_id, void* mempool_ptr, const char name[]);
unsigned mg_kni_tx_burst(struct rte_kni *kni, struct rte_mbuf **mbufs, unsigned num);
unsigned mg_kni_tx_single(struct rte_kni *kni, struct rte_mbuf *mbuf);
unsigned rte_kni_rx_burst(struct rte_kni *kni, struct rte_mbuf **mbufs, unsigned num);
int rte_kni_handle_request(struct rte_kni *kni);
void rte_kni_close(void);
int rte_kni_release(struct rte_kni *kni);
void rte_kni_init(unsigned int max_kni_ifaces);
]]
local lib = arg[1] == "C" and ffi.C or ffi.load(arg[1])
local missing = 0
for _, name in ipairs({"mg_create_kni", "mg_kni_tx_burst", "mg_kni_tx_single",
		"rte_kni_rx_burst", "rte_kni_handle_request", "rte_kni_close",
		"rte_kni_release", "rte_kni_init"}) do
	local ok, err = pcall(function() return lib[name] end)
	print(string.format("%-24s %s", name, ok and "found" or ("MISSING: " .. tostring(err))))
	if not ok then missing = missing + 1 end
end
os.exit(missing == 0 and 0 or 1)
