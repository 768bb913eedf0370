//! `#[test]` for `shardwheel-tokio-shim`: tokio's `#[tokio::test]`, with `start_paused =
//! true` taken out of its arguments and done instead by `::shardwheel::time::pause();` as the
//! test's first statement (after its inner attributes); with a multi-thread runtime it is an
//! error, as tokio's. The test's crate names `shardwheel` and `tokio` among its own
//! dependencies, as the expansion's paths do. Plain `proc_macro`: the arguments are a comma-separated list, and
//! the body is the item's last brace-delimited group, which is all this needs to read.

use proc_macro::{Delimiter, Group, Punct, Spacing, TokenStream, TokenTree};

/// tokio's test attribute, with `start_paused = true` as `shardwheel::time::pause()`.
#[proc_macro_attribute]
pub fn test(attr: TokenStream, item: TokenStream) -> TokenStream {
    let (args, paused) = without_start_paused(attr);
    if paused && args.to_string().contains("multi_thread") {
        // As tokio: a paused clock is a current-thread runtime's (here: the test thread's).
        return compile_error("start_paused = true needs the current-thread runtime (flavor = \"current_thread\")");
    }
    let mut item: Vec<TokenTree> = item.into_iter().collect();
    if paused {
        match item.last_mut() {
            Some(TokenTree::Group(body)) if body.delimiter() == Delimiter::Brace => {
                // After the body's inner attributes (`#![…]`), which must come first.
                let mut tokens: Vec<TokenTree> = body.stream().into_iter().collect();
                let mut at = 0;
                while matches!(tokens.get(at), Some(TokenTree::Punct(p)) if p.as_char() == '#')
                    && matches!(tokens.get(at + 1), Some(TokenTree::Punct(p)) if p.as_char() == '!')
                    && matches!(tokens.get(at + 2), Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Bracket)
                {
                    at += 3;
                }
                let rest = tokens.split_off(at);
                let mut stream = TokenStream::from_iter(tokens);
                stream.extend("::shardwheel::time::pause();".parse::<TokenStream>().expect("a statement"));
                stream.extend(rest);
                let mut group = Group::new(Delimiter::Brace, stream);
                group.set_span(body.span());
                *body = group;
            }
            _ => return compile_error("#[test(start_paused = true)] needs a function with a body"),
        }
    }
    // #[::tokio::test(args)] item
    let mut path: TokenStream = "::tokio::test".parse().expect("a path");
    path.extend([TokenTree::Group(Group::new(Delimiter::Parenthesis, args))]);
    let attribute = TokenTree::Group(Group::new(Delimiter::Bracket, path));
    let mut out = TokenStream::from_iter([TokenTree::Punct(Punct::new('#', Spacing::Alone)), attribute]);
    out.extend(item);
    out
}

/// The arguments without `start_paused = …`, and whether it was `true`.
fn without_start_paused(attr: TokenStream) -> (TokenStream, bool) {
    let mut args: Vec<Vec<TokenTree>> = vec![Vec::new()];
    for token in attr {
        match &token {
            TokenTree::Punct(p) if p.as_char() == ',' => args.push(Vec::new()),
            _ => args.last_mut().expect("one at least").push(token),
        }
    }
    let mut paused = false;
    let mut kept = TokenStream::new();
    for arg in args.into_iter().filter(|a| !a.is_empty()) {
        if matches!(arg.first(), Some(TokenTree::Ident(name)) if name.to_string() == "start_paused") {
            paused = matches!(arg.last(), Some(TokenTree::Ident(value)) if value.to_string() == "true");
            continue;
        }
        if !kept.is_empty() {
            kept.extend([TokenTree::Punct(Punct::new(',', Spacing::Alone))]);
        }
        kept.extend(arg);
    }
    (kept, paused)
}

fn compile_error(message: &str) -> TokenStream {
    let mut out: TokenStream = "::core::compile_error!".parse().expect("a path");
    let text = TokenTree::Literal(proc_macro::Literal::string(message));
    out.extend([TokenTree::Group(Group::new(Delimiter::Parenthesis, TokenStream::from(text)))]);
    out.extend([TokenTree::Punct(Punct::new(';', Spacing::Alone))]);
    out
}
