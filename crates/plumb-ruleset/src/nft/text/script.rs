//! `nft -f` scripts: `add|create table|chain|set|map|rule|element`, `insert rule`,
//! `flush ruleset|table|chain|set|map` and `delete|destroy ...`, as kube-proxy's nftables
//! mode writes its transactions. Each command changes the ruleset read so far; a script
//! is [`Completeness::Partial`] unless it starts with `flush ruleset`.

use super::lexer::{Tok, Token};
use super::{FAMILIES, Reader};
use crate::model::nft::{NftSet, SetKind, unquote};
use crate::model::{Completeness, Family, Location, RuleBody};

/// Whether `VERB OBJECT` is an nft script command that builds or changes a ruleset.
pub(super) fn builds_ruleset(verb: &str, object: &str) -> bool {
    matches!(
        (verb, object),
        (
            "add" | "create",
            "table" | "chain" | "set" | "map" | "rule" | "element"
        ) | ("insert", "rule")
            | ("flush", "ruleset" | "table" | "chain" | "set" | "map")
            | (
                "delete" | "destroy",
                "table" | "chain" | "set" | "map" | "rule" | "element"
            )
    )
}

/// A script command after its path was read: `VERB OBJECT [FAMILY] TABLE NAME`.
struct Command<'a> {
    verb: &'a str,
    verb_tok: Token,
    /// The object word (`chain`, `set`, `rule` ...), where most diagnostics point.
    obj_tok: Token,
    /// Index of the (live) table in the ruleset.
    table: usize,
    /// The chain, set or map named after the table (empty for table commands).
    name: &'a str,
    /// Where the object word is: new chains and sets are located there.
    loc: Location,
}

/// Whether the command's reader left the rest of the statement for
/// [`Reader::end_of_command`] to check.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CommandEnd {
    Check,
    /// Read (or skipped) through the end of the statement already.
    Done,
}

impl<'a> Reader<'a> {
    /// One command of an nft script (`nft -f` input) at the top level. Returns false,
    /// consuming nothing, when the statement is not a command that builds or changes a
    /// ruleset (`list`, `monitor`, `add counter` ... are noted and skipped by the caller).
    pub(super) fn script_command(&mut self) -> bool {
        let Some(verb_tok) = self.peek() else {
            return false;
        };
        let verb = self.s(&verb_tok);
        let Some(obj_tok) = self.tok(self.pos + 1).filter(|t| t.kind == Tok::Word) else {
            return false;
        };
        let object = self.s(&obj_tok);
        if !builds_ruleset(verb, object) {
            return false;
        }
        if self.stream.is_some() {
            // A script changes what it read before: read the whole way.
            self.stream_abort();
            return true;
        }
        if object == "ruleset" {
            self.flush_ruleset(verb_tok);
            return true;
        }
        self.note_script(verb_tok);
        self.pos += 1;
        if object == "table" && matches!(verb, "add" | "create") {
            self.table_header(true);
            self.end_of_command(verb_tok);
            return true;
        }
        self.pos += 1;
        let Some(cmd) = self.command_target(verb_tok, obj_tok) else {
            return true;
        };
        let check_end = match object {
            "chain" => self.chain_command(&cmd),
            "set" | "map" => self.set_command(&cmd),
            "rule" => self.rule_command(&cmd),
            "element" => self.element_command(&cmd),
            _ => self.table_command(&cmd),
        };
        if check_end == CommandEnd::Check {
            self.end_of_command(verb_tok);
        }
        true
    }

    /// `flush ruleset` (nftables.conf's first line): everything after it is the whole
    /// ruleset, whatever came before.
    fn flush_ruleset(&mut self, verb_tok: Token) {
        self.pos += 2;
        self.ruleset.tables.clear();
        self.chain_index.clear();
        self.dead_tables.clear();
        self.dead_chains.clear();
        self.deleted_names.clear();
        self.from_scratch = true;
        if self.ruleset.completeness == Completeness::Partial {
            self.ruleset.completeness = Completeness::Full;
        }
        self.end_of_command(verb_tok);
    }

    /// A command that builds or changes the ruleset makes the read partial (unless the
    /// script started with `flush ruleset`); the first one says so in a note.
    fn note_script(&mut self, verb_tok: Token) {
        if self.from_scratch {
            // Commands after `flush ruleset` build the whole ruleset: not partial.
        } else if self.ruleset.completeness == Completeness::Full {
            self.ruleset.completeness = Completeness::Partial;
        }
        if !self.script_noted && !self.from_scratch {
            self.script_noted = true;
            let line = self.text[verb_tok.line_start(self.text)..]
                .lines()
                .next()
                .unwrap_or("");
            self.note(
                &verb_tok,
                "an nft script (commands for `nft -f`, like kube-proxy's nftables transactions): it changes kernel state this text does not show, so the ruleset read is partial",
                line,
            );
        }
    }

    /// Reads `[FAMILY] TABLE [NAME]` after `VERB OBJECT` and finds the table (created by
    /// `add`, `create` and `insert`). `None` when the command is done with: its path was
    /// malformed (after an error), or it flushes or deletes in a table the script never
    /// declared (that table lives in the kernel, and the script's text says nothing about
    /// it).
    fn command_target(&mut self, verb_tok: Token, obj_tok: Token) -> Option<Command<'a>> {
        let verb = self.s(&verb_tok);
        let object = self.s(&obj_tok);
        let words = if object == "table" { 1 } else { 2 };
        let Some((family, path)) = self.object_path(words) else {
            let stmt = self.skip_statement();
            self.error(
                &verb_tok,
                format!(
                    "expected '{verb} {object} [FAMILY] {}'",
                    if words == 1 { "NAME" } else { "TABLE NAME" }
                ),
                stmt,
            );
            return None;
        };
        let loc = self.loc(&obj_tok);
        let creates = matches!(verb, "add" | "create" | "insert");
        let table = match self.find_table(family, path[0]) {
            Some(ti) => ti,
            None if creates => self.table_index(family, path[0], loc),
            None => {
                self.skip_statement();
                return None;
            }
        };
        Some(Command {
            verb,
            verb_tok,
            obj_tok,
            table,
            name: path[1],
            loc,
        })
    }

    /// `add|create chain`, `flush chain`, `delete|destroy chain`.
    fn chain_command(&mut self, cmd: &Command<'a>) -> CommandEnd {
        let ti = cmd.table;
        match cmd.verb {
            "add" | "create" => {
                let ci = self.chain_of(ti, cmd.name, cmd.loc);
                if self.peek().is_some_and(|t| t.kind == Tok::LBrace) {
                    self.pos += 1;
                    self.chain_body(ti, ci, cmd.obj_tok, cmd.name);
                }
            }
            "flush" => {
                if let Some(ci) = self.chain_index.get(&self.ruleset.tables, ti, cmd.name) {
                    self.ruleset.tables[ti].chains[ci].rules.clear();
                }
            }
            _ => self.delete_chain(ti, cmd.name),
        }
        CommandEnd::Check
    }

    /// `add|create set|map` (with an optional block), `flush set|map`,
    /// `delete|destroy set|map`.
    fn set_command(&mut self, cmd: &Command<'a>) -> CommandEnd {
        let ti = cmd.table;
        match cmd.verb {
            "add" | "create" => {
                let kind = if self.s(&cmd.obj_tok) == "map" {
                    SetKind::Map
                } else {
                    SetKind::Set
                };
                let mut set = NftSet {
                    name: cmd.name.into(),
                    kind,
                    location: cmd.loc,
                    ..NftSet::default()
                };
                if self.peek().is_some_and(|t| t.kind == Tok::LBrace) {
                    self.pos += 1;
                    self.set_body(&mut set, cmd.obj_tok);
                }
                let sets = &mut self.ruleset.tables[ti].sets;
                match sets.iter_mut().find(|s| s.name == set.name) {
                    // `add` of an existing set keeps it (and its elements).
                    Some(existing) => existing.elements.append(&mut set.elements),
                    None => sets.push(set),
                }
            }
            "flush" => {
                if let Some(set) = self.ruleset.tables[ti]
                    .sets
                    .iter_mut()
                    .find(|s| &*s.name == cmd.name)
                {
                    set.elements.clear();
                }
            }
            _ => self.ruleset.tables[ti]
                .sets
                .retain(|s| &*s.name != cmd.name),
        }
        CommandEnd::Check
    }

    /// `add|insert rule TABLE CHAIN STATEMENTS` and `delete|destroy rule TABLE CHAIN
    /// handle N`. Any other verb (`create rule`) is read as a deletion.
    fn rule_command(&mut self, cmd: &Command<'a>) -> CommandEnd {
        match cmd.verb {
            "add" | "insert" => self.add_rule(cmd),
            _ => {
                self.delete_rule(cmd);
                CommandEnd::Check
            }
        }
    }

    /// `add rule` appends, `insert rule` prepends; `position`, `index` and `handle`
    /// are noted and not followed. The rule reader reads through the end of the
    /// statement, so nothing is left to check after it.
    fn add_rule(&mut self, cmd: &Command<'a>) -> CommandEnd {
        let (ti, verb) = (cmd.table, cmd.verb);
        let ci = self.chain_of(ti, cmd.name, cmd.loc);
        if let Some(w) = self.peek_word()
            && matches!(w, "position" | "index" | "handle")
        {
            let Some(at) = self.peek() else {
                return CommandEnd::Done;
            };
            self.pos += 1;
            if self.peek().is_some_and(|t| t.kind == Tok::Word) {
                self.pos += 1;
            }
            self.note(
                &at,
                format!(
                    "'{w} N' is not followed: the rule is placed at the chain's {}",
                    if verb == "insert" { "start" } else { "end" }
                ),
                w,
            );
        }
        if !self
            .peek()
            .is_some_and(|t| !matches!(t.kind, Tok::Newline | Tok::Semi | Tok::RBrace))
        {
            self.error(
                &cmd.obj_tok,
                format!("expected a rule after '{verb} rule [FAMILY] TABLE CHAIN'"),
                cmd.name,
            );
            self.end_of_command(cmd.verb_tok);
            return CommandEnd::Done;
        }
        let before = self.ruleset.tables[ti].chains[ci].rules.len();
        self.rule(ti, ci);
        let rules = &mut self.ruleset.tables[ti].chains[ci].rules;
        if verb == "insert" && rules.len() > before {
            rules.rotate_right(1);
        }
        CommandEnd::Done
    }

    /// `delete rule TABLE CHAIN handle N`: removes the rule with that handle, if the
    /// script gave it one (`# handle N` in a listing it also contains).
    fn delete_rule(&mut self, cmd: &Command<'a>) {
        let ti = cmd.table;
        let handle = match (self.peek_word(), self.tok(self.pos + 1)) {
            (Some("handle"), Some(h)) => self.s(&h).parse::<u64>().ok(),
            _ => None,
        };
        if handle.is_some() {
            self.pos += 2;
        }
        match (
            handle,
            self.chain_index.get(&self.ruleset.tables, ti, cmd.name),
        ) {
            (Some(h), Some(ci)) => {
                let rules = &mut self.ruleset.tables[ti].chains[ci].rules;
                rules.retain(|r| match &r.body {
                    RuleBody::Nft(n) => n.handle() != Some(h),
                    _ => true,
                });
            }
            (None, _) => self.error(
                &cmd.obj_tok,
                "expected 'delete rule [FAMILY] TABLE CHAIN handle N'",
                self.s(&cmd.obj_tok),
            ),
            _ => {}
        }
    }

    /// `add|create element TABLE SET { ... }` adds to the set (declared or not: an
    /// undeclared one lives in the kernel, and what is added is kept under its name);
    /// `delete|destroy element` removes the listed keys from a declared set.
    fn element_command(&mut self, cmd: &Command<'a>) -> CommandEnd {
        let ti = cmd.table;
        let existing = self.ruleset.tables[ti]
            .sets
            .iter()
            .position(|s| &*s.name == cmd.name);
        let adding = matches!(cmd.verb, "add" | "create");
        let mut list = match existing {
            // `delete element` lists keys only: read them as a plain set.
            Some(si) if adding => NftSet {
                name: cmd.name.into(),
                kind: self.ruleset.tables[ti].sets[si].kind,
                value_type: self.ruleset.tables[ti].sets[si].value_type.clone(),
                ..NftSet::default()
            },
            _ => NftSet {
                name: cmd.name.into(),
                location: cmd.loc,
                ..NftSet::default()
            },
        };
        if self.peek().is_some_and(|t| t.kind == Tok::LBrace) {
            self.pos += 1;
            self.element_list(&mut list, cmd.obj_tok);
        } else {
            let stmt = self.skip_statement();
            self.error(&cmd.obj_tok, "expected '{ ELEMENT, ... }'", stmt);
            return CommandEnd::Done;
        }
        let sets = &mut self.ruleset.tables[ti].sets;
        match (existing, adding) {
            (Some(si), true) => sets[si].elements.append(&mut list.elements),
            (Some(si), false) => sets[si]
                .elements
                .retain(|e| !list.elements.iter().any(|d| d.key_text == e.key_text)),
            (None, true) => sets.push(list),
            (None, false) => {}
        }
        CommandEnd::Check
    }

    /// `flush table` empties its chains and sets; `delete|destroy table` removes it.
    /// (`add|create table` reads like a listing's table header: see `script_command`.)
    fn table_command(&mut self, cmd: &Command<'a>) -> CommandEnd {
        if cmd.verb == "flush" {
            let table = &mut self.ruleset.tables[cmd.table];
            table.chains.iter_mut().for_each(|c| c.rules.clear());
            table.sets.iter_mut().for_each(|s| s.elements.clear());
        } else {
            self.delete_table(cmd.table);
        }
        CommandEnd::Check
    }

    /// `[FAMILY] NAME...`: `words` names after an optional family, up to a brace or the
    /// end of the statement.
    fn object_path(&mut self, words: usize) -> Option<(Family, [&'a str; 2])> {
        let mut found: Vec<&'a str> = Vec::with_capacity(3);
        while found.len() < words + 1 {
            match self.tok(self.pos + found.len()) {
                Some(t) if t.kind == Tok::Word => found.push(self.s(&t)),
                _ => break,
            }
        }
        let has_family = found.len() > words && FAMILIES.contains(&found[0]);
        if found.len() < words {
            return None;
        }
        let family = match has_family {
            true => Family::parse(found[0]).unwrap_or(Family::Ip),
            false => Family::Ip,
        };
        let names = &found[usize::from(has_family)..usize::from(has_family) + words];
        self.pos += usize::from(has_family) + words;
        let first = unquote(names[0]);
        let second = names.get(1).map_or("", |n| unquote(n));
        Some((family, [first, second]))
    }

    /// After a command: nothing but the end of the statement may follow.
    fn end_of_command(&mut self, verb: Token) {
        let rest = self.skip_statement();
        if !rest.trim().is_empty() {
            let text = rest.to_string();
            self.error(
                &verb,
                format!("unexpected '{text}' after the command"),
                &text,
            );
        }
    }

    fn delete_chain(&mut self, ti: usize, name: &'a str) {
        if let Some(ci) = self.chain_index.remove(&self.ruleset.tables, ti, name) {
            self.dead_chains.insert((ti, ci));
            if self.deleted_names.insert((ti, name)) {
                self.ruleset.tables[ti].deleted_chains.push(name.into());
            }
        }
    }

    fn delete_table(&mut self, ti: usize) {
        self.dead_tables.insert(ti);
        self.chain_index.forget_table(ti);
    }

    /// Drops what the script deleted (after reading: indexes no longer matter).
    pub(super) fn remove_deleted(&mut self) {
        for (ti, table) in self.ruleset.tables.iter_mut().enumerate() {
            let mut ci = 0;
            table.chains.retain(|_| {
                ci += 1;
                !self.dead_chains.contains(&(ti, ci - 1))
            });
        }
        let mut ti = 0;
        self.ruleset.tables.retain(|_| {
            ti += 1;
            !self.dead_tables.contains(&(ti - 1))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse_text;
    use super::super::tests::errors;
    use crate::model::{Completeness, Family, Hook};

    /// kube-proxy's nftables transaction shape: declarations, elements, rules.
    const SCRIPT: &str = "add table ip kube-proxy { comment \"rules for kube-proxy\" ; }
add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; comment \"ClusterIP\" ; }
add chain ip kube-proxy services
add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }
add chain ip kube-proxy service-A
add rule ip kube-proxy nat-prerouting jump services
add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips
add element ip kube-proxy service-ips { 10.43.0.1 . tcp . 443 : goto service-A }
add rule ip kube-proxy service-A numgen random mod 2 vmap { 0 : goto ep-1 , 1 : goto ep-2 }
insert rule ip kube-proxy service-A ip saddr != 10.42.0.0/16 jump mark-for-masquerade
";

    #[test]
    fn a_script_builds_the_tables_it_declares_and_is_partial() {
        let rs = parse_text(SCRIPT);
        assert!(errors(&rs).is_empty(), "{:?}", errors(&rs));
        assert_eq!(rs.completeness, Completeness::Partial);
        assert!(
            rs.diagnostics
                .iter()
                .any(|d| d.message.contains("nft script"))
        );
        let t = &rs.tables[0];
        assert_eq!((&*t.name, t.family), ("kube-proxy", Family::Ip));
        let pre = t.chain("nat-prerouting").unwrap();
        assert_eq!(pre.base.as_ref().unwrap().hook, Hook::Prerouting);
        let svc = t.chain("service-A").unwrap();
        // `insert` puts the rule first; positions follow.
        assert!(svc.rules[0].text.starts_with("ip saddr != 10.42.0.0/16"));
        assert_eq!(svc.positioned().map(|(p, _)| p).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(svc.rules[0].location().line, 10);
        let map = t.sets.iter().find(|s| &*s.name == "service-ips").unwrap();
        assert!(map.is_verdict_map());
        assert_eq!(map.elements.len(), 1);
        assert_eq!(&*map.elements[0].key_text, "10.43.0.1 . tcp . 443");
    }

    #[test]
    fn flush_and_delete_commands_change_what_the_script_built() {
        let script = format!(
            "{SCRIPT}flush chain ip kube-proxy service-A
delete element ip kube-proxy service-ips {{ 10.43.0.1 . tcp . 443 }}
delete chain ip kube-proxy services
add element ip kube-proxy service-ips {{ 10.43.0.10 . udp . 53 : goto service-A }}
"
        );
        let rs = parse_text(&script);
        assert!(errors(&rs).is_empty(), "{:?}", errors(&rs));
        let t = &rs.tables[0];
        assert!(t.chain("service-A").unwrap().rules.is_empty());
        assert!(t.chain("services").is_none());
        assert_eq!(&*t.deleted_chains[0], "services");
        // The index still finds the chains after the deleted one.
        assert!(t.chain("nat-prerouting").is_some());
        let map = t.sets.iter().find(|s| &*s.name == "service-ips").unwrap();
        let keys: Vec<&str> = map.elements.iter().map(|e| &*e.key_text).collect();
        assert_eq!(keys, ["10.43.0.10 . udp . 53"]);
        let rs = parse_text(&format!("{SCRIPT}flush ruleset\n"));
        assert!(rs.tables.is_empty());
    }

    #[test]
    fn deleted_chains_and_tables_keep_the_rest_addressable() {
        let rs = parse_text(
            "add table ip a\nadd table ip b\nadd chain ip a x\nadd chain ip a y\nadd chain ip a z\n\
             add chain ip b w\ndelete chain ip a y\ndelete table ip a\nadd table ip a\n\
             add rule ip b w accept\nadd chain ip b v\ndelete chain ip b v\nadd chain ip b v\n\
             add rule ip b v drop\nadd rule ip b v counter\ndelete rule ip b v\n",
        );
        // `delete rule` without a handle is an error that does not eat the next line.
        let e = errors(&rs);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].contains("16:") && e[0].contains("handle N"), "{e:?}");
        let names: Vec<&str> = rs.tables.iter().map(|t| &*t.name).collect();
        assert_eq!(
            names,
            ["b", "a"],
            "deleted table a is gone, the re-added one is new"
        );
        assert!(rs.tables[1].chains.is_empty());
        let b = &rs.tables[0];
        // Rules added after the deletions land in the right chains.
        assert_eq!(b.chain("w").unwrap().rules[0].text.as_str(), "accept");
        let v = b.chain("v").unwrap();
        assert_eq!(v.rules.len(), 2);
        assert_eq!(v.rules[0].text.as_str(), "drop");
        // Deleted, then added again: it exists, so no reference to it is dangling.
        assert!(b.deleted_chains.is_empty(), "{:?}", b.deleted_chains);
    }

    #[test]
    fn flush_or_delete_in_an_undeclared_table_invents_no_table() {
        let rs =
            parse_text("flush chain ip nat X\ndelete element ip t s { 1.2.3.4 }\nadd table ip k\n");
        assert!(errors(&rs).is_empty(), "{:?}", errors(&rs));
        let names: Vec<&str> = rs.tables.iter().map(|t| &*t.name).collect();
        assert_eq!(names, ["k"]);
    }

    #[test]
    fn rule_commands_cut_short_are_errors_not_panics() {
        for text in [
            "add rule ip t c",
            "insert rule t c",
            "add rule ip t c position",
            "add rule ip t c position 3",
            "add rule ip t c\n",
            "delete rule ip t c handle",
        ] {
            let rs = parse_text(text);
            assert!(
                !errors(&rs).is_empty() || text.starts_with("delete"),
                "{text:?}"
            );
        }
    }

    #[test]
    fn a_script_that_starts_with_flush_ruleset_is_the_whole_ruleset() {
        let rs = parse_text(
            "flush ruleset\ntable inet filter {\n chain input { type filter hook input priority 0; policy drop; }\n}\nadd rule inet filter input accept\n",
        );
        assert!(errors(&rs).is_empty(), "{:?}", errors(&rs));
        assert_eq!(rs.completeness, Completeness::Full);
        assert_eq!(rs.tables[0].chains[0].rules.len(), 1);
    }

    #[test]
    fn bad_script_commands_say_where() {
        let rs = parse_text("add chain ip\nadd table ip t\nadd element ip t s 1.2.3.4\n");
        let e = errors(&rs);
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].contains("1:") && e[0].contains("TABLE NAME"), "{e:?}");
        assert!(e[1].contains("3:") && e[1].contains("ELEMENT"), "{e:?}");
        // Commands that do not build a ruleset are noted and skipped, as before.
        let rs = parse_text("list ruleset\n");
        assert!(errors(&rs).is_empty());
        assert!(rs.diagnostics.iter().any(|d| d.message.contains("skipped")));
    }
}
