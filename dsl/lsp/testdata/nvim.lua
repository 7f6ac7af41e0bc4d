-- Drives Neovim's built-in LSP client against `tqw-dsl lsp`, headless:
-- open a workflow, collect its diagnostics, jump to a definition, rename
-- a step and request completions, then write what happened as JSON.
-- TestNeovim (nvim_test.go) runs it and checks the result. Written for
-- Neovim 0.7 (Debian 12's) and later.
local env = vim.env
local out = {}
local function finish(err)
  out.error = err
  local f = assert(io.open(env.TQW_OUT, 'w'))
  f:write(vim.fn.json_encode(out))
  f:close()
  vim.cmd('qa!')
end
local function pos(s) -- "line,col": 1-based line, 0-based byte column
  local l, c = s:match('(%d+),(%d+)')
  return { tonumber(l), tonumber(c) }
end

local ok, err = pcall(function()
  vim.cmd('edit ' .. vim.fn.fnameescape(env.TQW_FILE))
  local buf = vim.api.nvim_get_current_buf()
  local id = vim.lsp.start_client({
    name = 'tqw',
    cmd = { env.TQW_BIN, 'lsp', '--debounce', '0' },
    root_dir = vim.fn.fnamemodify(env.TQW_FILE, ':h'),
  })
  assert(id, 'the client did not start')
  vim.lsp.buf_attach_client(buf, id)
  if not vim.wait(20000, function() return #vim.diagnostic.get(buf) > 0 end, 20) then
    error('no diagnostics within 20 s')
  end
  out.diagnostics = {}
  for _, d in ipairs(vim.diagnostic.get(buf)) do
    local code = d.code
    if code == nil and d.user_data and d.user_data.lsp then code = d.user_data.lsp.code end
    table.insert(out.diagnostics, { lnum = d.lnum, col = d.col, end_col = d.end_col, message = d.message, severity = d.severity, code = code, source = d.source })
  end

  -- Go to definition with the command a user maps to gd.
  vim.api.nvim_win_set_cursor(0, pos(env.TQW_DEF_AT))
  vim.lsp.buf.definition()
  local start = pos(env.TQW_DEF_AT)
  vim.wait(10000, function() return vim.api.nvim_win_get_cursor(0)[1] ~= start[1] end, 20)
  out.definition = vim.api.nvim_win_get_cursor(0)

  -- Rename the step under the cursor.
  vim.api.nvim_win_set_cursor(0, pos(env.TQW_RENAME_AT))
  vim.lsp.buf.rename(env.TQW_RENAME_TO)
  vim.wait(10000, function()
    return vim.fn.search(env.TQW_RENAME_TO, 'nw') > 0
  end, 20)
  out.lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)

  -- Completion requests, as the completion plugins send them.
  out.completions = {}
  for _, at in ipairs(vim.split(env.TQW_COMPLETE_AT, ';')) do
    local p = pos(at)
    local params = { textDocument = { uri = vim.uri_from_bufnr(buf) }, position = { line = p[1] - 1, character = p[2] } }
    local res = vim.lsp.buf_request_sync(buf, 'textDocument/completion', params, 10000)
    local labels = {}
    for _, r in pairs(res or {}) do
      local items = r.result and (r.result.items or r.result) or {}
      for _, it in ipairs(items) do table.insert(labels, it.label) end
    end
    table.insert(out.completions, labels)
  end
  vim.lsp.stop_client(id)
end)
finish(not ok and tostring(err) or nil)
